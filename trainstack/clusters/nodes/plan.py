"""The plan of a multi-node cluster on one machine: N worker containers of an image running trainstack-sshd on
a docker network of their own, and the launcher containers that `nodes.run` starts there, as data.

Nothing is published on the host: the workers' sshd (port 2222) is reachable on the cluster's network only.
The runner (`invoke nodes.up`) creates exactly what the plan lists and labels it, so `nodes.down` removes every
container, the network and the cluster's keys.
"""
from __future__ import annotations

from typing import Any

from trainrun.image_contract import EXAMPLES_DIR, IMAGE_USER, SSH_KEYS_DIR, SSHD_COMMAND, SSHD_PORT
from trainrun.remote import IDENTITY_ENV, KNOWN_HOSTS_ENV, PORT_ENV
from trainrun.validate import MAX_RANKS
from trainstack.clusters.containers import ClusterError, ClusterKind
from trainstack.image.naming import check_reference, flavor_image

NODES = ClusterKind("nodes", "cluster of nodes")
NODES_LABEL, NODES_ROLE_LABEL, NODES_SHARE_LABEL = NODES.label, NODES.role_label, NODES.share_label
# The host folder of the cluster's ssh keys (keys.py), and each worker's slots.
NODES_KEYS_LABEL = NODES.sublabel("keys")
NODES_SLOTS_LABEL = NODES.sublabel("slots")
DEFAULT_NODES = "trainstack-nodes"
MAX_WORKERS = 64
# Where the cluster's key files appear in its containers (host files: keys.py). Workers get the public key
# only, as the authorized key trainstack-sshd reads; launchers get the private key, the workers' host keys and
# a hostfile.
AUTHORIZED_KEYS = f"{SSH_KEYS_DIR}/authorized_keys"
IDENTITY_FILE = f"{SSH_KEYS_DIR}/id_ed25519"
KNOWN_HOSTS = f"{SSH_KEYS_DIR}/known_hosts"
HOSTFILE = f"{SSH_KEYS_DIR}/hostfile"


def worker_names(name: str, count: int) -> list[str]:
    return [f"{name}-worker-{index + 1}" for index in range(count)]


def nodes_plan(count: int = 2, image: str | None = None, name: str = DEFAULT_NODES, slots: int = 1) -> dict[str, Any]:
    """The network, workers and launcher of a cluster for these options; raises ClusterError on bad input."""
    if not isinstance(count, int) or not 1 <= count <= MAX_WORKERS:
        raise ClusterError.bad_option("--count", count, "is not a number of workers", f"1 to {MAX_WORKERS}")
    if not isinstance(slots, int) or not 1 <= slots <= MAX_RANKS // MAX_WORKERS:
        raise ClusterError.bad_option("--slots", slots, "is not a number of ranks per worker",
                                      f"1 to {MAX_RANKS // MAX_WORKERS}")
    NODES.check_name(name)
    image = check_reference("--image", image) if image else flavor_image("cpu")
    workers = worker_names(name, count)
    hosts = ",".join(f"{worker}:{slots}" for worker in workers)
    return {
        "nodes": name,
        "image": image,
        "network": {"name": name, "labels": {NODES_LABEL: name}},
        "ssh": {"port": SSHD_PORT, "user": IMAGE_USER, "authorized_keys": AUTHORIZED_KEYS,
                "identity_file": IDENTITY_FILE, "known_hosts": KNOWN_HOSTS, "hostfile": HOSTFILE},
        "workers": [_worker(name, worker, slots) for worker in workers],
        "launcher": launcher_spec(name),
        "hosts": hosts,
        "slots": slots,
        "example": (f"invoke nodes.run --name {name} -- trainrun mpi -np {count * slots} -H {hosts} "
                    f"python {EXAMPLES_DIR}/horovod_torch_mnist.py"),
    }


def _worker(name: str, worker: str, slots: int) -> dict[str, Any]:
    return {
        "name": worker,
        "hostname": worker,
        "command": [SSHD_COMMAND],
        "environment": {},
        # key_file: a file of the cluster's key folder (keys.py), mounted read-only at target.
        "mounts": [{"key_file": "authorized_keys", "target": AUTHORIZED_KEYS, "read_only": True}],
        "ports": [],
        "labels": {NODES_LABEL: name, NODES_ROLE_LABEL: "worker", NODES_SLOTS_LABEL: str(slots)},
    }


def launcher_spec(name: str) -> dict[str, Any]:
    """A container `nodes.run` starts on the cluster's network for one command: trainrun there reaches the
    workers with the cluster's key, accepting only the host keys the workers showed at `up`."""
    return {
        "name_prefix": f"{name}-launcher",
        "environment": {PORT_ENV: str(SSHD_PORT), IDENTITY_ENV: IDENTITY_FILE, KNOWN_HOSTS_ENV: KNOWN_HOSTS},
        "mounts": [{"key_file": "id_ed25519", "target": IDENTITY_FILE, "read_only": True},
                   {"key_file": "known_hosts", "target": KNOWN_HOSTS, "read_only": True},
                   {"key_file": "hostfile", "target": HOSTFILE, "read_only": True}],
        "labels": {NODES_LABEL: name, NODES_ROLE_LABEL: "launcher"},
    }
