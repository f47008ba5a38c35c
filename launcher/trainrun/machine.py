"""Facts about the launching machine that plans depend on, detected once and injectable in tests."""
from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Mapping

from .engines import current
from .engines.slurm import Allocation
from .ports import pick_free_port


@dataclass(frozen=True)
class Machine:
    is_root: bool
    cpu_count: int
    environ: Mapping[str, str]
    python: str
    free_port: int
    mpi_flavor: str | None = None  # "openmpi", "mpich" or None when no mpirun
    has_torch: bool = True
    has_pyspark: bool = True
    has_java: bool = True
    has_ray: bool = True
    horovodrun: str | None = "horovodrun"
    spark_home: str | None = None
    gpu_count: int = 0
    local_names: tuple[str, ...] = ()  # this machine's host names, which -H may name (no ssh to them)
    interfaces: tuple[str, ...] = ()  # this machine's network interfaces (empty: not looked up)
    slurm: Allocation | None = None  # the Slurm allocation this shell holds, where srun can start the ranks
    cwd: str = "/"  # the job's working folder (what a container of its ranks mounts and enters)


# What mpirun links to names the implementation without running it (a launch should not pay for that).
_LAUNCHER_FLAVORS = {"orterun": "openmpi", "prterun": "openmpi", "mpiexec.hydra": "mpich", "mpiexec.hydra.exe": "mpich"}


def detect_mpi_flavor(mpirun: str = "mpirun") -> str | None:
    path = shutil.which(mpirun)
    if path is None:
        return None
    flavor = _LAUNCHER_FLAVORS.get(os.path.basename(os.path.realpath(path)))
    if flavor:
        return flavor
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout + out.stderr).lower()
    if "open mpi" in text or "open-mpi" in text:
        return "openmpi"
    if "hydra" in text or "mpich" in text or "intel(r) mpi" in text:
        return "mpich"
    return None


def _spark_home() -> str | None:
    if os.environ.get("SPARK_HOME"):
        return os.environ["SPARK_HOME"]
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    return os.path.dirname(spec.origin)


def gpu_count() -> int:
    """GPUs `nvidia-smi -L` lists; 0 without nvidia-smi or a driver."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def available_cpus() -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota (a container's --cpus)."""
    cpus = len(os.sched_getaffinity(0))
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()
        if quota != "max":
            cpus = min(cpus, max(1, int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return cpus


def available_memory() -> int | None:
    """Bytes of memory this process may use: a cgroup's limit (a container's --memory), else the machine's."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                limit = f.read().strip()
        except OSError:
            continue
        if limit.isdigit() and int(limit) < 2**60:
            return int(limit)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return None


def host_names() -> tuple[str, ...]:
    """This machine's host name and its short form: mpirun starts ranks on them without ssh."""
    name = socket.gethostname()
    return tuple(dict.fromkeys(n for n in (name, name.split(".")[0]) if n))


def detect_machine(backend: str) -> Machine:
    """Probe only what `backend` needs, so a launch stays cheap."""
    spark = backend in ("spark", "spark-pool", "ray")
    return Machine(
        is_root=os.geteuid() == 0,
        cpu_count=os.cpu_count() or 1,
        environ=dict(os.environ),
        python=sys.executable,
        free_port=pick_free_port(),
        mpi_flavor=detect_mpi_flavor() if backend in ("mpi", "horovod") else None,
        has_torch=importlib.util.find_spec("torch") is not None,
        has_pyspark=spark and importlib.util.find_spec("pyspark") is not None,
        has_java=spark and (shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))),
        has_ray=backend == "ray" and importlib.util.find_spec("ray") is not None,
        horovodrun=shutil.which("horovodrun"),
        spark_home=_spark_home() if spark else None,
        gpu_count=gpu_count() if backend in ("spark", "torch") else 0,
        local_names=host_names() if backend in ("mpi", "horovod") else (),
        interfaces=tuple(name for _, name in socket.if_nameindex()) if backend in ("mpi", "horovod") else (),
        slurm=current(os.environ).allocation if backend in ("mpi", "torch", "spark", "spark-pool", "ray") else None,
        cwd=os.getcwd(),
    )


def default_route_interface(route_table: str = "/proc/net/route") -> str | None:
    """The interface of the default route, which multi-node NCCL and Gloo should use."""
    try:
        with open(route_table) as f:
            rows = [line.split() for line in f.readlines()[1:]]
    except OSError:
        return None
    for row in rows:
        if len(row) > 2 and row[1] == "00000000":
            return row[0]
    return None


def interface_for_address(address: str) -> str | None:
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == address for a in addrs):
            return name
    return None
