"""A cluster's ssh keys, made on this machine for each `nodes.up` and deleted by `nodes.down`: never in an
image, an environment variable, a label's value other than the folder's path, or a log.

One folder per cluster (mode 0700, under the temp dir, named trainstack-nodes-NAME-*) holds:

- `id_ed25519` / `id_ed25519.pub`: the key pair (ssh-keygen, ed25519, no passphrase). The private key is
  mounted read-only into launcher containers only. It must be readable by the image's user (uid 1000) there:
  as root it is given to that uid (mode 0600); another user's file stays theirs with mode 0644, which ssh
  accepts from a file its user does not own, while the 0700 folder keeps it from the host's other users.
- `authorized_keys`: the public key, mounted read-only into every worker, where trainstack-sshd authorizes it.
- `known_hosts`: each worker's host key (made at its start, read from its log) under its name and address,
  so that launchers check host keys strictly.
- `hostfile`: `WORKER slots=N` lines for `trainrun mpi --hostfile`.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from trainstack.clusters.containers import ClusterError, give_to_image_user, private_folder, remove_private_folder

PREFIX = "trainstack-nodes-"
PRIVATE_KEY = "id_ed25519"


def make_keys(name: str) -> Path:
    """A new folder with the cluster's key pair and empty known_hosts and hostfile; returns its path."""
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise ClusterError("ssh-keygen is not installed on this machine; install the ssh client "
                           "(apt-get install openssh-client), which makes the cluster's key pair")
    directory = private_folder(f"{PREFIX}{name}-")
    try:
        done = subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", f"{PREFIX}{name}",
                               "-f", str(directory / PRIVATE_KEY)], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=60)
        if done.returncode != 0:
            raise ClusterError(f"ssh-keygen could not make the cluster's key pair: {done.stderr.strip()}")
        public = (directory / f"{PRIVATE_KEY}.pub").read_text()
        _write(directory / "authorized_keys", public)
        _write(directory / "known_hosts", "")
        _write(directory / "hostfile", "")
        give_to_image_user(directory / PRIVATE_KEY)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return directory


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o644)


def write_known_hosts(directory: Path, host_keys: dict[str, tuple[list[str], str]], port: int) -> None:
    """host_keys: worker -> (its names and addresses, its public host key `TYPE BASE64`)."""
    lines = [",".join(f"[{name}]:{port}" for name in names) + f" {key}\n" for names, key in host_keys.values()]
    _write(directory / "known_hosts", "".join(lines))


def write_hostfile(directory: Path, workers: list[str], slots: int) -> None:
    _write(directory / "hostfile", "".join(f"{worker} slots={slots}\n" for worker in workers))


def remove_keys(path: Path) -> None:
    remove_private_folder(path, PREFIX, "authorized_keys")
