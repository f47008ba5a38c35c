"""Finding a pool's containers and network by the plan's labels, so any process can manage the pool."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.models.containers import Container

from trainstack.clusters.containers import ClusterError

from .layout import MASTER_PORT, MASTER_UI_PORT, POOL, POOL_CONF_LABEL, POOL_ROLE_LABEL, POOL_SHARE_LABEL


@dataclass(frozen=True)
class RunningPool:
    name: str
    master: Container
    workers: list[Container]
    network: str
    gateway: str  # the host's address on the pool network, for a driver on the host
    image: str
    share: Path | None
    spark_conf: Path | None  # the host file with the pool's secret (security.py)
    ui_url: str
    master_url: str  # from the host, through the published port
    network_master_url: str  # from containers on the pool network
    notebook: Container | None  # JupyterLab driving the pool (`up --notebook`)

    def worker_names_by_ip(self) -> dict[str, str]:
        """Worker containers by their address on the pool network. A stopped container has none any
        more, so the addresses recorded when the pool came up name the workers the master lists DEAD."""
        names = recorded_worker_addresses(self.spark_conf) if self.spark_conf else {}
        names.update(current_worker_addresses(self.workers, self.network))
        return names


WORKER_ADDRESSES_FILE = "worker-addresses.json"


def current_worker_addresses(workers: list[Container], network: str) -> dict[str, str]:
    addresses = {}
    for container in workers:
        address = container.attrs["NetworkSettings"]["Networks"].get(network, {}).get("IPAddress")
        if address:
            addresses[address] = container.name
    return addresses


def record_worker_addresses(spark_conf: Path, addresses: dict[str, str]) -> None:
    """Kept in the pool's private directory, beside its conf (security.py), which `pool.down` removes."""
    (spark_conf.parent / WORKER_ADDRESSES_FILE).write_text(json.dumps(addresses, indent=1) + "\n")


def recorded_worker_addresses(spark_conf: Path) -> dict[str, str]:
    try:
        return json.loads((spark_conf.parent / WORKER_ADDRESSES_FILE).read_text())
    except (OSError, ValueError):
        return {}


def find_pool(client: docker.DockerClient, name: str) -> RunningPool:
    """The running pool called `name`; ClusterError naming the pools there are when it is not up."""
    containers = POOL.containers(client, name)
    masters = [container for container in containers if container.labels.get(POOL_ROLE_LABEL) == "master"]
    if not masters:
        raise POOL.not_up(client, name)
    master = masters[0]
    if master.status != "running":
        raise ClusterError(f"pool {name!r}: its master container {master.name} is {master.status}; "
                        f"remove the pool with `invoke pool.down --name {name}` and start it again")
    network = next(iter(master.attrs["NetworkSettings"]["Networks"]))
    share = master.labels.get(POOL_SHARE_LABEL)
    return RunningPool(
        name=name,
        master=master,
        workers=[container for container in containers if container.labels.get(POOL_ROLE_LABEL) == "worker"],
        network=network,
        gateway=client.networks.get(network).attrs["IPAM"]["Config"][0]["Gateway"],
        image=master.attrs["Config"]["Image"],
        share=Path(share) if share else None,
        spark_conf=Path(master.labels[POOL_CONF_LABEL]) if POOL_CONF_LABEL in master.labels else None,
        ui_url=f"http://127.0.0.1:{_host_port(master, MASTER_UI_PORT)}",
        master_url=f"spark://127.0.0.1:{_host_port(master, MASTER_PORT)}",
        network_master_url=f"spark://{master.attrs['Config']['Hostname']}:{MASTER_PORT}",
        notebook=next((container for container in containers
                       if container.labels.get(POOL_ROLE_LABEL) == "notebook"), None),
    )


def _host_port(container: Container, port: int) -> str:
    return container.ports[f"{port}/tcp"][0]["HostPort"]
