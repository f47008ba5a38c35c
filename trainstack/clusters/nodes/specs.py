"""Plan entries translated into docker SDK arguments (`networks.create`, `containers.create`). No entry has
`ports`: nothing of a cluster is published on the host."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainstack.image.naming import NODES_KEYS_LABEL, NODES_SHARE_LABEL

from .plan import SHARE_TARGET

# Docker's 64 MiB /dev/shm is too small for PyTorch data loaders and Horovod's shared memory.
SHM_SIZE = "1g"


def network_kwargs(plan: dict[str, Any]) -> dict[str, Any]:
    network = plan["network"]
    return {"name": network["name"], "driver": "bridge", "labels": network["labels"]}


def _volumes(spec: dict[str, Any], keys: Path, share: Path | None) -> dict[str, dict[str, str]]:
    volumes = {str(keys / mount["key_file"]): {"bind": mount["target"], "mode": "ro" if mount["read_only"] else "rw"}
               for mount in spec["mounts"]}
    if share is not None:
        volumes[str(share)] = {"bind": SHARE_TARGET, "mode": "ro"}
    return volumes


def _labels(spec: dict[str, Any], keys: Path, share: Path | None) -> dict[str, str]:
    labels = {**spec["labels"], NODES_KEYS_LABEL: str(keys)}
    if share is not None:
        labels[NODES_SHARE_LABEL] = str(share)
    return labels


def worker_kwargs(plan: dict[str, Any], spec: dict[str, Any], keys: Path, share: Path | None = None) -> dict[str, Any]:
    """Arguments for `containers.create` of a worker: trainstack-sshd with the cluster's public key."""
    return {
        "image": plan["image"],
        "name": spec["name"],
        "hostname": spec["hostname"],
        "command": spec["command"],
        "environment": spec["environment"],
        "labels": _labels(spec, keys, share),
        "volumes": _volumes(spec, keys, share),
        "network": plan["network"]["name"],
        "shm_size": SHM_SIZE,
        "detach": True,
    }


def launcher_kwargs(spec: dict[str, Any], image: str, network: str, command: list[str], container_name: str,
                    keys: Path, share: Path | None = None) -> dict[str, Any]:
    """A launcher: a container of the cluster's image on its network running `command` with the cluster's
    private key, the workers' host keys and hostfile, and trainrun's TRAINRUN_SSH_* set to them."""
    kwargs: dict[str, Any] = {
        "image": image,
        "name": container_name,
        "hostname": container_name,
        "command": command,
        "environment": dict(spec["environment"]),
        "labels": _labels(spec, keys, share),
        "volumes": _volumes(spec, keys, share),
        "network": network,
        "shm_size": SHM_SIZE,
        "detach": True,
    }
    if share is not None:
        kwargs["working_dir"] = SHARE_TARGET
    return kwargs
