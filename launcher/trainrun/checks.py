"""What `trainrun doctor` judges and what it says: the facts collected once about this machine (Facts) and each
check's verdict (Check). The doctor (trainrun.doctor) and each engine's own checks (trainrun.engines) share them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok", "warn" or "fail"
    detail: str
    hint: str = ""


@dataclass(frozen=True)
class Facts:
    manifest_path: str
    manifest: dict | None
    packages: Mapping[str, str | None]
    gpu_count: int = 0
    driver_version: str | None = None
    driver_cuda: str | None = None  # the newest CUDA the driver supports (nvidia-smi's "CUDA Version")
    torch_cuda: str | None = None
    shm_bytes: int | None = None
    primary_interface: str | None = None
    interfaces: tuple[str, ...] = ()
    mpi: str | None = None  # e.g. "openmpi 4.1.4"
    java: str | None = None
    environ: Mapping[str, str] = field(default_factory=dict)
    nvidia_smi: bool = False  # the NVIDIA container runtime (`--gpus all`) mounts it with the driver
    horovod_keras_3: bool = False  # Horovod carries the Keras 3 patch (images/patches/horovod-0.28.1-keras3.patch)
    # torch.compile's caches: (variable, directory, the noexec mount it is on or None) (trainrun.compile_cache).
    compile_caches: tuple[tuple[str, str, str | None], ...] = ()
    # Open MPI's btl_vader_single_copy_mechanism and where its value comes from (ompi_info), and why this machine
    # refuses cross-memory attach (trainrun.cma), None where it allows it.
    single_copy: tuple[str, str] | None = None
    cma_refused: str | None = None
    # Slurm: the MPI plugin types `srun --mpi=list` offers (None without srun), and the locked-memory limit in bytes
    # (None: unlimited).
    srun_mpi_plugins: tuple[str, ...] | None = None
    memlock_bytes: int | None = None
    ray_token_file: bool = False  # ~/.ray/auth_token exists (engines/ray.py)
