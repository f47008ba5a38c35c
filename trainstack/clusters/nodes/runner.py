"""`up`, `status` and `down` of a multi-node cluster: the plan's network and worker containers through the
docker SDK, their sshd ready and their host keys recorded for the launchers."""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Callable

import docker
from docker.models.containers import Container

from trainrun.image_contract import EXAMPLES_DIR
from trainstack.clusters.containers import ClusterError, network_kwargs, removed_on_failure
from trainstack.console import report
from trainstack.docker_client import connect, require_built_image, share_directory

from .keys import make_keys, remove_keys, write_hostfile, write_known_hosts
from .lookup import find_nodes
from .plan import DEFAULT_NODES, HOSTFILE, NODES, NODES_KEYS_LABEL, nodes_plan
from .specs import worker_kwargs

# What trainstack-sshd prints at start, and sshd once it listens.
HOST_KEY_LINE = re.compile(r"^trainstack-sshd: host key (\S+ \S+)", re.MULTILINE)
LISTENING_LINE = "Server listening on"


def up(count: int = 2, image: str | None = None, name: str = DEFAULT_NODES, slots: int = 1,
       share: str | None = None, timeout: float = 60.0, client: docker.DockerClient | None = None,
       progress: Callable[[str], None] = report) -> dict[str, Any]:
    """Start the workers and wait until every one's sshd listens; returns the plan. On any failure (or Ctrl-C)
    removes everything it made (containers, network, keys) before raising."""
    plan = nodes_plan(count, image, name, slots)
    share_dir = share_directory(share, ClusterError.bad_option)
    client = client or connect()
    require_built_image(client, plan["image"], ClusterError.bad_option)
    NODES.refuse_if_up(client, name)
    keys = make_keys(name)

    def docker_failure(err: docker.errors.APIError) -> ClusterError:
        return ClusterError(f"nodes {name!r}: docker failed: {err.explanation or err}; removed what was made")

    with removed_on_failure(lambda: _remove(client, name, keys), docker_failure):
        client.networks.create(**network_kwargs(plan))
        for spec in plan["workers"]:
            client.containers.create(**worker_kwargs(plan, spec, keys, share_dir)).start()
            progress(f"nodes {name}: started {spec['name']}")
        host_keys = _wait_until_ready(client, plan, timeout, progress)
        workers = find_nodes(client, name)
        names = {worker.name: [worker.name, *filter(None, [workers.address(worker)])] for worker in workers.workers}
        write_known_hosts(keys, {worker: (names[worker], key) for worker, key in host_keys.items()},
                          plan["ssh"]["port"])
        write_hostfile(keys, [spec["name"] for spec in plan["workers"]], slots)
    return plan


def status(name: str = DEFAULT_NODES, client: docker.DockerClient | None = None) -> str:
    """The cluster's workers (state, address, sshd), and how to run a job on them."""
    nodes = find_nodes(client or connect(), name)
    lines = [f"nodes {name}: image {nodes.image}, network {nodes.network} (nothing published on the host), "
             f"keys in {nodes.keys}", ""]
    for worker in nodes.workers:
        ready = "sshd ready" if worker.status == "running" and LISTENING_LINE in _logs(worker) else "sshd not ready"
        lines.append(f"  {worker.name}  {worker.status}  {nodes.address(worker) or '-'}  {ready}")
    lines += ["", f"hosts: -H {nodes.hosts} (--hostfile {HOSTFILE} in a launcher of `nodes.run`)",
              f"run:   invoke nodes.run --name {name} -- trainrun mpi -np {len(nodes.workers) * nodes.slots} "
              f"-H {nodes.hosts} python {EXAMPLES_DIR}/horovod_torch_mnist.py"]
    return "\n".join(lines)


def down(name: str = DEFAULT_NODES, client: docker.DockerClient | None = None) -> list[str]:
    """Remove every container (workers and launchers) and the network labelled with the cluster's name, and its
    keys; returns what it removed."""
    return _remove(client or connect(), name)


def _remove(client: docker.DockerClient, name: str, keys: Path | None = None) -> list[str]:
    folders = {keys} if keys else set()
    folders |= {Path(container.labels[NODES_KEYS_LABEL]) for container in NODES.containers(client, name)
                if NODES_KEYS_LABEL in container.labels}
    removed = NODES.remove(client, name)
    for folder in folders:
        remove_keys(folder)
    return removed


def _logs(container: Container) -> str:
    return container.logs().decode(errors="replace")


def _wait_until_ready(client: docker.DockerClient, plan: dict[str, Any], timeout: float,
                      progress: Callable[[str], None]) -> dict[str, str]:
    """Each worker's host key (`TYPE BASE64`), once its sshd listens."""
    deadline = time.monotonic() + timeout
    host_keys: dict[str, str] = {}
    names = [spec["name"] for spec in plan["workers"]]
    while time.monotonic() < deadline:
        NODES.check_none_exited(client, plan["nodes"])
        for container in NODES.containers(client, plan["nodes"], "worker"):
            logs = _logs(container)
            found = HOST_KEY_LINE.search(logs)
            if found and LISTENING_LINE in logs and container.name not in host_keys:
                host_keys[container.name] = found.group(1)
        if len(host_keys) == len(names):
            progress(f"nodes {plan['nodes']}: {len(names)} workers' sshd listening on port {plan['ssh']['port']}")
            return {name: host_keys[name] for name in names}
        time.sleep(0.5)
    waiting = ", ".join(name for name in names if name not in host_keys)
    raise ClusterError(f"nodes {plan['nodes']!r}: sshd not listening after {timeout:.0f}s on {waiting}; "
                       f"removed the cluster.\n{NODES.log_tails(client, plan['nodes'], 'worker')}")
