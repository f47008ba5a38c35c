"""Plan entries translated into docker SDK arguments (`networks.create`, `volumes.create`, `containers.create`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from pooltemplates import package_file
from trainstack.clusters.containers import SHARE_TARGET, share_volume
from trainstack.clusters.containers import container_kwargs as cluster_container_kwargs

from .layout import POOL_CONF_LABEL, POOL_LABEL, POOL_ROLE_LABEL, POOL_SHARE_LABEL, work_volume
from .security import SPARK_CONF_DIR, conf_volume


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
        volumes.update(share_volume(share))
        labels[POOL_SHARE_LABEL] = str(share)
    if spark_conf is not None:
        volumes.update(conf_volume(spark_conf))
        labels[POOL_CONF_LABEL] = str(spark_conf)
    options: dict[str, Any] = {
        "environment": spec["environment"],
        "ports": {f"{port['container']}/tcp": (port["host_ip"], port["host"]) for port in spec["ports"]},
    }
    if spec.get("gpu_device_ids"):
        options["device_requests"] = [
            {"driver": "nvidia", "device_ids": spec["gpu_device_ids"], "capabilities": [["gpu"]]}]
    return cluster_container_kwargs(plan["image"], spec["name"], spec["command"], plan["network"]["name"], labels,
                                    volumes, **options)


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
        volumes.update(share_volume(share))
    options: dict[str, Any] = {"working_dir": SHARE_TARGET if share is not None else work["target"]}
    if spark_conf is not None:
        volumes.update(conf_volume(spark_conf))
        options["environment"] = {"SPARK_CONF_DIR": SPARK_CONF_DIR}
    return cluster_container_kwargs(image, container_name, command, network,
                                    {POOL_LABEL: pool_name, POOL_ROLE_LABEL: "driver"}, volumes, **options)
