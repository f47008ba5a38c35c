"""Finding a cluster's containers and network by the plan's labels, so any process can manage it."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.models.containers import Container

from .plan import NODES, NODES_KEYS_LABEL, NODES_SHARE_LABEL, NODES_SLOTS_LABEL


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


def _worker_number(container: Container) -> int:
    found = re.search(r"-worker-(\d+)$", container.name)
    return int(found.group(1)) if found else 0


def find_nodes(client: docker.DockerClient, name: str) -> RunningNodes:
    """The cluster called `name`; ClusterError naming the clusters there are when it is not up."""
    workers = sorted(NODES.containers(client, name, "worker"), key=_worker_number)
    if not workers:
        raise NODES.not_up(client, name)
    first = workers[0]
    networks = NODES.networks(client, name)
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
