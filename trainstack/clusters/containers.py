"""What every cluster of containers on this machine shares, the local Spark pool (clusters/pool) and the multi-node
clusters (clusters/nodes) alike: its error, the labels that let any process find its containers, networks and
volumes, the rule for its name, the network and /dev/shm of its containers, the private folder of its secrets,
how a failed `up` removes what it made, and the log lines a failure shows."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import docker
import docker.errors
from docker.models.containers import Container
from docker.models.networks import Network
from docker.models.volumes import Volume

from trainrun.image_contract import IMAGE_USER_UID
from trainstack.docker_client import remove_each
from trainstack.errors import TrainstackError
from trainstack.image.naming import LABEL_PREFIX

# `up --share DIR` appears here, read-only, in every container of a cluster.
SHARE_TARGET = "/job"
# Docker's 64 MiB /dev/shm is too small for PyTorch data loaders and Horovod's shared memory.
SHM_SIZE = "1g"
LOG_LINES_ON_FAILURE = 8
# Docker's rule for container and network names. The cluster's name prefixes both, and its containers' host
# names (at most 63 characters) add a suffix such as -worker-12 or -notebook.
_DOCKER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
MAX_NAME = 48


class ClusterError(TrainstackError):
    """A cluster could not be made, read, used or removed; the message says why in one place.

    Bad input: ClusterError.bad_option(option, value, rule, valid)."""


@dataclass(frozen=True)
class ClusterKind:
    """One product's clusters: what its tasks are called (`invoke pool.up`, `invoke nodes.up`), what its messages
    call one, and its labels: LABEL=NAME on everything it makes, ROLE on each container, SHARE its --share folder."""

    task: str
    noun: str

    @property
    def label(self) -> str:
        return f"{LABEL_PREFIX}.{self.task}"

    def sublabel(self, key: str) -> str:
        return f"{self.label}.{key}"

    @property
    def role_label(self) -> str:
        return self.sublabel("role")

    @property
    def share_label(self) -> str:
        return self.sublabel("share")

    def containers(self, client: docker.DockerClient, name: str, role: str | None = None) -> list[Container]:
        containers = client.containers.list(all=True, filters={"label": f"{self.label}={name}"})
        return [container for container in containers if role is None or container.labels.get(self.role_label) == role]

    def networks(self, client: docker.DockerClient, name: str) -> list[Network]:
        return client.networks.list(filters={"label": f"{self.label}={name}"})

    def volumes(self, client: docker.DockerClient, name: str) -> list[Volume]:
        return client.volumes.list(filters={"label": f"{self.label}={name}"})

    def names(self, client: docker.DockerClient) -> list[str]:
        """The clusters of this kind that have containers here."""
        return sorted({container.labels[self.label]
                       for container in client.containers.list(all=True, filters={"label": self.label})})

    def check_name(self, name: str) -> None:
        if not _DOCKER_NAME.fullmatch(name) or len(name) > MAX_NAME:
            raise ClusterError.bad_option("--name", name, "is not a docker name", f"up to {MAX_NAME} letters, "
                                          "digits, '_', '.' and '-', starting with a letter or digit")

    def refuse_if_up(self, client: docker.DockerClient, name: str) -> None:
        if self.containers(client, name) or self.networks(client, name) or self.volumes(client, name):
            raise ClusterError.bad_option("--name", name, "is already up",
                                          f"another name, or `invoke {self.task}.down --name {name}` first")

    def not_up(self, client: docker.DockerClient, name: str) -> ClusterError:
        """The error for a cluster that is not up, naming those that are."""
        others = ", ".join(self.names(client)) or f"none is up; start one with `invoke {self.task}.up`"
        return ClusterError.bad_option("--name", name, f"is not a running {self.noun}", others)

    def check_none_exited(self, client: docker.DockerClient, name: str) -> None:
        """While `up` waits: a container that exited ends the wait, with its last log lines."""
        for container in self.containers(client, name):
            if container.status in ("exited", "dead"):
                role = container.labels.get(self.role_label, "container")
                raise ClusterError(f"{self.task} {name!r}: {role} {container.name} exited with code "
                                   f"{container.attrs['State']['ExitCode']}; removed the {self.noun}.\n"
                                   f"{log_tail(container)}")

    def log_tails(self, client: docker.DockerClient, name: str, role: str | None = None) -> str:
        return "\n".join(log_tail(container) for container in self.containers(client, name, role))

    def remove(self, client: docker.DockerClient, name: str) -> list[str]:
        """Removes every container, network and volume labelled with the cluster's name; returns their names."""
        return (remove_each(self.containers(client, name), force=True) + remove_each(self.networks(client, name))
                + remove_each(self.volumes(client, name), force=True))


def container_kwargs(image: str, name: str, command: list[str], network: str, labels: dict[str, str],
                     volumes: dict[str, dict[str, str]], **options: Any) -> dict[str, Any]:
    """Arguments for `containers.create` of a cluster's container: detached, on the cluster's network under its
    name (its host name there too), with a /dev/shm of SHM_SIZE; `options` adds docker SDK arguments
    (environment, ports, working_dir, device_requests)."""
    return {"image": image, "name": name, "hostname": name, "command": command, "labels": labels,
            "volumes": volumes, "network": network, "shm_size": SHM_SIZE, "detach": True, **options}


def share_volume(share: Path) -> dict[str, dict[str, str]]:
    """The docker SDK `volumes` entry of `up --share DIR`: read-only at SHARE_TARGET."""
    return {str(share): {"bind": SHARE_TARGET, "mode": "ro"}}


def network_kwargs(plan: dict[str, Any]) -> dict[str, Any]:
    """Arguments for `networks.create` of a plan's network, a bridge of its own."""
    network = plan["network"]
    return {"name": network["name"], "driver": "bridge", "labels": network["labels"]}


def log_tail(container: Container) -> str:
    lines = container.logs(tail=LOG_LINES_ON_FAILURE).decode(errors="replace").rstrip()
    return f"--- last lines of {container.name}:\n{lines}"


@contextlib.contextmanager
def removed_on_failure(remove: Callable[[], object],
                       docker_failure: Callable[[docker.errors.APIError], ClusterError]) -> Iterator[None]:
    """What `up` makes inside is removed (`remove()`) if anything fails there, Ctrl-C included; a docker error
    becomes `docker_failure(err)`, the one line the user sees."""
    try:
        yield
    except docker.errors.APIError as err:
        remove()
        raise docker_failure(err) from None
    except BaseException:
        remove()
        raise


def private_folder(prefix: str) -> Path:
    """A new folder for a cluster's secrets (a pool's Spark conf, the nodes' ssh keys): under the temp dir, mode
    0700, so none of the host's other users reads them."""
    return Path(tempfile.mkdtemp(prefix=prefix))


def remove_private_folder(path: Path, prefix: str, marker: str) -> None:
    """Deletes `path` only when private_folder made it (an absolute path, named with `prefix`, holding the file
    `marker`), whatever a container's label names."""
    if path.is_absolute() and path.name.startswith(prefix) and (path / marker).is_file():
        shutil.rmtree(path, ignore_errors=True)


def give_to_image_user(path: Path) -> None:
    """A secret file the image's user reads in the containers: as root, given to that uid (mode 0600); another
    user's file stays theirs with mode 0644 (ssh accepts a key its user does not own), the 0700 folder keeping
    it from the host's other users."""
    if os.geteuid() == 0:
        os.chown(path, IMAGE_USER_UID, IMAGE_USER_UID)
        path.chmod(0o600)
    elif os.getuid() != IMAGE_USER_UID:
        path.chmod(0o644)
