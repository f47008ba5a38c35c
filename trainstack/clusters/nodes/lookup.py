"""Finding a cluster's containers and network by the plan's labels, so any process can manage it."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.models.containers import Container
from docker.models.networks import Network

from trainstack.image.naming import (
    NODES_KEYS_LABEL,
    NODES_LABEL,
    NODES_ROLE_LABEL,
    NODES_SHARE_LABEL,
    NODES_SLOTS_LABEL,
)

from .errors import NodesError


@dataclass(frozen=True)
class RunningNodes:
    name: str
    workers: list[Container]  # in order: worker-1, worker-2, ...
    network: str
    image: str
    keys: Path | None  # the host folder of the cluster's keys (keys.py)
    share: Path | None
    slots: int

    @property
    def hosts(self) -> str:
        """The -H value for trainrun mpi and mpirun."""
        return ",".join(f"{worker.name}:{self.slots}" for worker in self.workers)

    def address(self, worker: Container) -> str | None:
        return worker.attrs["NetworkSettings"]["Networks"].get(self.network, {}).get("IPAddress") or None


def nodes_containers(client: docker.DockerClient, name: str, role: str | None = None) -> list[Container]:
    containers = client.containers.list(all=True, filters={"label": f"{NODES_LABEL}={name}"})
    return [container for container in containers if role is None or container.labels.get(NODES_ROLE_LABEL) == role]


def nodes_networks(client: docker.DockerClient, name: str) -> list[Network]:
    return client.networks.list(filters={"label": f"{NODES_LABEL}={name}"})


def nodes_names(client: docker.DockerClient) -> list[str]:
    return sorted({container.labels[NODES_LABEL]
                   for container in client.containers.list(all=True, filters={"label": NODES_LABEL})})


def _worker_number(container: Container) -> int:
    found = re.search(r"-worker-(\d+)$", container.name)
    return int(found.group(1)) if found else 0


def find_nodes(client: docker.DockerClient, name: str) -> RunningNodes:
    """The cluster called `name`; NodesError naming the clusters there are when it is not up."""
    workers = sorted(nodes_containers(client, name, "worker"), key=_worker_number)
    if not workers:
        others = ", ".join(nodes_names(client)) or "none is up; start one with `invoke nodes.up`"
        raise NodesError.bad_option("--name", name, "is not a running cluster of nodes", others)
    first = workers[0]
    networks = nodes_networks(client, name)
    keys = first.labels.get(NODES_KEYS_LABEL)
    share = first.labels.get(NODES_SHARE_LABEL)
    return RunningNodes(
        name=name,
        workers=workers,
        network=networks[0].name if networks else name,
        image=first.attrs["Config"]["Image"],
        keys=Path(keys) if keys else None,
        share=Path(share) if share else None,
        slots=int(first.labels.get(NODES_SLOTS_LABEL, "1")),
    )
