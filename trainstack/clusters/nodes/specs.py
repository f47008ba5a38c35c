"""Plan entries translated into docker SDK arguments (`containers.create`). No entry has `ports`: nothing of a
cluster is published on the host."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainstack.clusters.containers import SHARE_TARGET, container_kwargs, share_volume

from .plan import NODES_KEYS_LABEL, NODES_SHARE_LABEL


def _volumes(spec: dict[str, Any], keys: Path, share: Path | None) -> dict[str, dict[str, str]]:
    volumes = {str(keys / mount["key_file"]): {"bind": mount["target"], "mode": "ro" if mount["read_only"] else "rw"}
               for mount in spec["mounts"]}
    if share is not None:
        volumes.update(share_volume(share))
    return volumes


def _labels(spec: dict[str, Any], keys: Path, share: Path | None) -> dict[str, str]:
    labels = {**spec["labels"], NODES_KEYS_LABEL: str(keys)}
    if share is not None:
        labels[NODES_SHARE_LABEL] = str(share)
    return labels


def worker_kwargs(plan: dict[str, Any], spec: dict[str, Any], keys: Path, share: Path | None = None) -> dict[str, Any]:
    """Arguments for `containers.create` of a worker: trainstack-sshd with the cluster's public key."""
    return container_kwargs(plan["image"], spec["name"], spec["command"], plan["network"]["name"],
                            _labels(spec, keys, share), _volumes(spec, keys, share), environment=spec["environment"])


def launcher_kwargs(spec: dict[str, Any], image: str, network: str, command: list[str], container_name: str,
                    keys: Path, share: Path | None = None) -> dict[str, Any]:
    """A launcher: a container of the cluster's image on its network running `command` with the cluster's
    private key, the workers' host keys and hostfile, and trainrun's TRAINRUN_SSH_* set to them."""
    options: dict[str, Any] = {"environment": dict(spec["environment"])}
    if share is not None:
        options["working_dir"] = SHARE_TARGET
    return container_kwargs(image, container_name, command, network, _labels(spec, keys, share),
                            _volumes(spec, keys, share), **options)
