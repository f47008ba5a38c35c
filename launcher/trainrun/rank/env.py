"""The uniform rank environment: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE under every launcher."""
from __future__ import annotations

from typing import Mapping

# First match wins: Open MPI, MPICH/Hydra (PMI), then Horovod's Gloo launcher. torchrun sets the targets itself.
SOURCES = {
    "RANK": ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "HOROVOD_RANK"),
    "WORLD_SIZE": ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "HOROVOD_SIZE"),
    "LOCAL_RANK": ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "HOROVOD_LOCAL_RANK"),
    "LOCAL_WORLD_SIZE": ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "HOROVOD_LOCAL_SIZE"),
}


def launcher_rank_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The uniform names mapped from the launcher's own variables; empty under torchrun."""
    mapped = {}
    for name, sources in SOURCES.items():
        for source in sources:
            if source in environ:
                mapped[name] = environ[source]
                break
    return mapped
