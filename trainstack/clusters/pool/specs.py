"""Plan entries translated into docker SDK arguments (`networks.create`, `containers.create`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from pooltemplates import package_file
from trainstack.image.naming import POOL_CONF_LABEL, POOL_LABEL, POOL_ROLE_LABEL, POOL_SHARE_LABEL

from .layout import work_volume
from .security import SPARK_CONF_DIR, conf_volume

# Where `up --share DIR` appears in every container of the pool, and the label that remembers DIR.
SHARE_TARGET = "/job"
# Docker's 64 MiB /dev/shm is too small for PyTorch data loaders and Horovod's shared memory.
SHM_SIZE = "1g"


def network_kwargs(plan: dict[str, Any]) -> dict[str, Any]:
    network = plan["network"]
    return {"name": network["name"], "driver": "bridge", "labels": network["labels"]}


def volume_kwargs(plan: dict[str, Any]) -> dict[str, Any]:
    """Arguments for `volumes.create` of the pool's work volume."""
    return {"name": plan["work_volume"]["name"], "labels": plan["work_volume"]["labels"]}


def container_kwargs(plan: dict[str, Any], spec: dict[str, Any], share: Path | None = None,
                     locate: Callable[[str], Path] = package_file, spark_conf: Path | None = None) -> dict[str, Any]:
    """Arguments for `containers.create` of the plan's master or a worker; `locate` finds package files;
    `spark_conf` is the pool's conf file (security.py), mounted where the spec's SPARK_CONF_DIR points."""
    volumes = {str(locate(mount["package_file"])): {
        "bind": mount["target"], "mode": "ro" if mount["read_only"] else "rw"} for mount in spec["mounts"]}
    if spec["labels"][POOL_ROLE_LABEL] != "master":
        volumes[plan["work_volume"]["name"]] = {"bind": plan["work_volume"]["target"], "mode": "rw"}
    labels = dict(spec["labels"])
    if share is not None:
        volumes[str(share)] = {"bind": SHARE_TARGET, "mode": "ro"}
        labels[POOL_SHARE_LABEL] = str(share)
    if spark_conf is not None:
        volumes.update(conf_volume(spark_conf))
        labels[POOL_CONF_LABEL] = str(spark_conf)
    kwargs: dict[str, Any] = {
        "image": plan["image"],
        "name": spec["name"],
        "hostname": spec["hostname"],
        "command": spec["command"],
        "environment": spec["environment"],
        "labels": labels,
        "volumes": volumes,
        "ports": {f"{port['container']}/tcp": (port["host_ip"], port["host"]) for port in spec["ports"]},
        "network": plan["network"]["name"],
        "shm_size": SHM_SIZE,
        "detach": True,
    }
    if spec.get("gpu_device_ids"):
        kwargs["device_requests"] = [
            {"driver": "nvidia", "device_ids": spec["gpu_device_ids"], "capabilities": [["gpu"]]}]
    return kwargs


def notebook_kwargs(plan: dict[str, Any], share: Path | None, spark_conf: Path, template_file: Path) -> dict[str, Any]:
    """Arguments for `containers.create` of the plan's notebook: a driver that keeps running, with the pool's conf
    and `template_file` (the host file of the plan's template_file) read-only at its target."""
    spec = plan["notebook"]
    kwargs = container_kwargs(plan, spec, share, spark_conf=spark_conf)
    kwargs["volumes"][str(template_file)] = {"bind": spec["template_file"]["target"], "mode": "ro"}
    return kwargs


def driver_kwargs(pool_name: str, image: str, network: str, command: list[str], container_name: str,
                  share: Path | None, spark_conf: Path | None = None) -> dict[str, Any]:
    """A job's driver: a container of the pool's image on the pool network with the pool's work volume, removed
    when `pool.down` runs; with the pool's conf (its secret) when it has one. It works in the share, or else in
    the work volume."""
    work = work_volume(pool_name)
    volumes = {work["name"]: {"bind": work["target"], "mode": "rw"}}
    if share is not None:
        volumes[str(share)] = {"bind": SHARE_TARGET, "mode": "ro"}
    if spark_conf is not None:
        volumes.update(conf_volume(spark_conf))
    kwargs: dict[str, Any] = {
        "image": image,
        "name": container_name,
        "hostname": container_name,
        "command": command,
        "labels": {POOL_LABEL: pool_name, POOL_ROLE_LABEL: "driver"},
        "network": network,
        "shm_size": SHM_SIZE,
        "volumes": volumes,
        "working_dir": SHARE_TARGET if share is not None else work["target"],
        "detach": True,
    }
    if spark_conf is not None:
        kwargs["environment"] = {"SPARK_CONF_DIR": SPARK_CONF_DIR}
    return kwargs
