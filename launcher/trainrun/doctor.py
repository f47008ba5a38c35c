"""`trainrun doctor`: preflight checks users run first; exits non-zero when something blocks training.

Facts are collected once (collect_facts) and judged by pure code (run_checks), so every rule is
unit-tested without the hardware it is about.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict
from importlib import metadata
from typing import Any, Mapping

from . import cma
from .compile_cache import compiler_caches, noexec_mount, noexec_problem
from .image_contract import MANIFEST_PATH
from .machine import default_route_interface, detect_mpi_flavor, gpu_count
from .checks import Check, Facts
from .engines.ray import ray_checks, token_file_exists
from .engines.slurm import slurm_checks

FRAMEWORKS = ("torch", "tensorflow", "tensorflow-cpu", "horovod")
REPORTED_PACKAGES = (*FRAMEWORKS, "keras", "tf_keras", "pyspark", "ray", "mpi4py", "cloudpickle", "psutil")
# TensorFlow >= 2.16 makes tf.keras Keras 2 (the tf_keras package) only for these values.
LEGACY_KERAS_VALUES = ("true", "True", "1")
SHM_NEEDED = 1 << 30  # DataLoader workers and NCCL's shared-memory transport want far more than Docker's 64 MiB
# The oldest Linux driver that runs each CUDA major's runtime: any 12.x through minor-version
# compatibility from 525.60.13 (CUDA 12.0's minimum), 13.x from 580.
DRIVER_MINIMUM = {12: "525.60.13", 13: "580"}




def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


def _driver_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def manifest_checks(facts: Facts) -> list[Check]:
    if facts.manifest is None:
        return [Check("manifest", "ok", f"no image manifest at {facts.manifest_path}: plain host")]
    m = facts.manifest
    checks = [Check("manifest", "ok", f"{facts.manifest_path}: flavor {m.get('flavor')}, python {m.get('python')}")]
    for name, wanted in sorted((m.get("packages") or {}).items()):
        have = facts.packages.get(name)
        if have is None and name in facts.packages:
            checks.append(Check(name, "fail", f"the manifest lists {wanted} but it is not installed",
                                "the image is damaged or the environment changed: use a fresh image"))
        elif have is not None and have != wanted:
            checks.append(Check(name, "fail", f"installed {have}, the image manifest says {wanted}",
                                f"pip install {name}=={wanted}, or rebuild the image"))
    return checks


def package_checks(facts: Facts) -> list[Check]:
    checks = [Check(name, "ok", version) for name, version in sorted(facts.packages.items()) if version]
    if not any(facts.packages.get(name) for name in FRAMEWORKS):
        checks.append(Check("framework", "fail", "none of torch, tensorflow, horovod is installed",
                            "pip install torch (or use a trainstack image)"))
    return checks


def tf_keras_flavor(facts: Facts) -> str | None:
    """Which Keras `tf.keras` is, as TensorFlow decides it: "keras 3", "keras 2"; None without TensorFlow."""
    tensorflow = facts.packages.get("tensorflow") or facts.packages.get("tensorflow-cpu")
    if tensorflow is None:
        return None
    legacy = facts.environ.get("TF_USE_LEGACY_KERAS") in LEGACY_KERAS_VALUES
    if _version_tuple(tensorflow) < (2, 16) or (legacy and facts.packages.get("tf_keras")):
        return "keras 2"
    return "keras 3"


def keras_checks(facts: Facts) -> list[Check]:
    flavor = tf_keras_flavor(facts)
    if flavor is None:
        return []
    if flavor == "keras 2":
        source = "tf_keras, TF_USE_LEGACY_KERAS=1" if facts.packages.get("tf_keras") else "TensorFlow < 2.16"
        checks = [Check("tf.keras", "ok", f"Keras 2 ({source})")]
    else:
        checks = [Check("tf.keras", "ok", f"Keras {facts.packages.get('keras') or '3'}"
                        + ("; TF_USE_LEGACY_KERAS=1 would give Keras 2 (tf_keras)" if facts.packages.get("tf_keras")
                           else ""))]
    if facts.packages.get("horovod"):
        if flavor == "keras 2" or facts.horovod_keras_3:
            checks.append(Check("horovod-keras", "ok", f"horovod.tensorflow.keras supports {flavor.title()}"))
        else:
            checks.append(Check("horovod-keras", "warn", "horovod.tensorflow.keras supports Keras 2 only here "
                                "(Horovod issue #4290)", "set TF_USE_LEGACY_KERAS=1 with tf_keras installed, "
                                "or use a trainstack image, whose Horovod supports Keras 3"))
    return checks


def driver_minimum(cuda: str) -> str | None:
    return DRIVER_MINIMUM.get(_version_tuple(cuda)[0])


def _driver_requirement(cuda: str) -> str:
    minimum = driver_minimum(cuda)
    if minimum is None:
        return f"CUDA {cuda}"
    compatibility = " through minor-version compatibility" if _version_tuple(cuda)[0] == 12 else ""
    return f"CUDA {cuda}, which needs an NVIDIA driver >= {minimum}{compatibility}"


def cuda_checks(facts: Facts) -> list[Check]:
    manifest_cuda = ((facts.manifest or {}).get("libraries") or {}).get("cuda")
    if facts.gpu_count == 0:
        if not manifest_cuda:
            return [Check("gpu", "ok", "no NVIDIA GPU visible: CPU training")]
        missing = ("nvidia-smi lists no GPU" if facts.nvidia_smi else
                   "no nvidia-smi: the container runs without the NVIDIA runtime, which mounts the driver")
        return [Check("gpu", "warn", f"this image is built for {_driver_requirement(manifest_cuda)}; no NVIDIA GPU "
                      f"is visible ({missing}): training runs on CPU",
                      f"on a host with an NVIDIA GPU, driver >= {driver_minimum(manifest_cuda)} and the NVIDIA "
                      "Container Toolkit, run the container with --gpus all")]
    checks = [Check("gpu", "ok", f"{facts.gpu_count} GPU(s), driver {facts.driver_version}, "
                                 f"supports CUDA up to {facts.driver_cuda}")]
    minimum = driver_minimum(manifest_cuda) if manifest_cuda else None
    if minimum and facts.driver_version:
        if _driver_tuple(facts.driver_version) < _driver_tuple(minimum):
            checks.append(Check("driver", "fail", f"driver {facts.driver_version} is too old: this image is built "
                                f"for {_driver_requirement(manifest_cuda)}", f"upgrade the NVIDIA driver to >= {minimum}"))
        else:
            checks.append(Check("driver", "ok", f"{facts.driver_version} >= {minimum}, the minimum for this image's "
                                f"CUDA {manifest_cuda}"))
    runtime = manifest_cuda or facts.torch_cuda
    if runtime and facts.driver_cuda:
        need, have = _version_tuple(runtime), _version_tuple(facts.driver_cuda)
        if need[:1] > have[:1]:
            checks.append(Check("cuda", "fail", f"CUDA runtime {runtime} needs a driver for CUDA {need[0]}.x; "
                                f"this driver supports up to {facts.driver_cuda}",
                                f"upgrade the NVIDIA driver, or use an image built for CUDA <= {facts.driver_cuda}"))
        elif need > have:
            checks.append(Check("cuda", "warn", f"CUDA runtime {runtime} is newer than the driver's "
                                f"{facts.driver_cuda}: runs only through minor-version compatibility",
                                "upgrade the NVIDIA driver if kernels fail to load (PTX JIT errors)"))
        else:
            checks.append(Check("cuda", "ok", f"runtime {runtime} <= driver's {facts.driver_cuda}"))
    if facts.gpu_count > 1 and "NCCL_P2P_DISABLE" not in facts.environ:
        checks.append(Check("nccl-p2p", "ok", "GPU peer-to-peer enabled",
                            "if NCCL fails with peer access errors (e.g. 'peer access is not supported'), "
                            "set NCCL_P2P_DISABLE=1"))
    return checks


def network_checks(facts: Facts) -> list[Check]:
    configured = facts.environ.get("NCCL_SOCKET_IFNAME")
    if configured:
        wanted = [name.lstrip("^=") for name in configured.split(",")]
        if configured.startswith("^") or any(name in facts.interfaces for name in wanted):
            return [Check("nccl-socket", "ok", f"NCCL_SOCKET_IFNAME={configured}")]
        return [Check("nccl-socket", "fail", f"NCCL_SOCKET_IFNAME={configured} names no interface here "
                      f"({', '.join(facts.interfaces) or 'none found'})",
                      f"export NCCL_SOCKET_IFNAME={facts.primary_interface or 'eth0'}")]
    if facts.primary_interface is None:
        return [Check("nccl-socket", "warn", "no default route found: multi-node jobs cannot pick an interface",
                      "set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the interface the nodes share")]
    return [Check("nccl-socket", "ok", f"primary interface {facts.primary_interface}",
                  f"if multi-node NCCL fails with ncclInternalError, export "
                  f"NCCL_SOCKET_IFNAME={facts.primary_interface} (and GLOO_SOCKET_IFNAME for Gloo)")]


def shm_checks(facts: Facts) -> list[Check]:
    if facts.shm_bytes is None:
        return [Check("/dev/shm", "warn", "/dev/shm is missing", "mount a tmpfs at /dev/shm (docker: --shm-size=8g)")]
    size = f"{facts.shm_bytes / (1 << 20):.0f} MiB"
    if facts.shm_bytes >= SHM_NEEDED:
        return [Check("/dev/shm", "ok", size)]
    hint = "run the container with --shm-size=8g or --ipc=host"
    # NCCL's shared-memory transport fails outright when it runs out; DataLoader workers only on big batches.
    status = "fail" if facts.gpu_count > 1 else "warn"
    return [Check("/dev/shm", status, f"{size}: too small for DataLoader workers, NCCL and Ray's object store", hint)]


def tool_checks(facts: Facts) -> list[Check]:
    libraries = (facts.manifest or {}).get("libraries") or {}
    checks = []
    for name, found, wanted_by_image, install in (
        ("mpi", facts.mpi, libraries.get("openmpi"), "apt-get install openmpi-bin (for trainrun mpi)"),
        ("java", facts.java, libraries.get("java"), "apt-get install openjdk-17-jre-headless (for trainrun spark)"),
    ):
        if found:
            checks.append(Check(name, "ok", found))
        else:
            status = "fail" if wanted_by_image else "warn"
            checks.append(Check(name, status, "not found" + (" though the image manifest lists it"
                                                             if wanted_by_image else ""), install))
    if facts.packages.get("pyspark") and not facts.java:
        checks.append(Check("spark", "warn", "pyspark is installed but cannot start without Java", checks[-1].hint))
    return checks


def compile_checks(facts: Facts) -> list[Check]:
    """torch.compile loads the kernels it builds from its caches: not from a noexec mount."""
    if not facts.packages.get("torch"):
        return []
    checks = []
    for variable, directory, mount in facts.compile_caches:
        if mount is None:
            checks.append(Check("torch.compile", "ok", f"{variable}: {directory}, on a mount with exec"))
        else:
            problem = noexec_problem(variable, directory, mount)
            checks.append(Check("torch.compile", "warn", f"{variable} = {directory!r}: {problem.rule}",
                                f"set {problem.valid}"))
    return checks


def single_copy_checks(facts: Facts) -> list[Check]:
    """Open MPI's ranks on one host copy a large message once with cross-memory attach, where this machine
    allows it, else twice through shared memory; cma where it is refused works too, but prints a line for each
    large message."""
    if facts.single_copy is None:
        return []
    value, source = facts.single_copy
    setting = f"btl_vader_single_copy_mechanism {value} ({source})"
    if facts.cma_refused is None and value == "cma":
        return [Check("mpi-cma", "ok", f"{setting}: ranks on one host copy a large message once")]
    if facts.cma_refused is None:
        return [Check("mpi-cma", "warn", f"{setting}, though cross-memory attach works here: ranks on one host "
                      "copy each large message twice", f"export {cma.MCA_VARIABLE}=cma")]
    if value == "cma":
        return [Check("mpi-cma", "warn", f"{setting}, but {facts.cma_refused}: Open MPI prints 'Read -1, "
                      "expected N, errno = 1' for every large message", f"export {cma.MCA_VARIABLE}=none")]
    return [Check("mpi-cma", "ok", f"{setting}: ranks on one host copy through shared memory, since "
                  f"{facts.cma_refused}")]


def run_checks(facts: Facts) -> list[Check]:
    return [*manifest_checks(facts), *package_checks(facts), *keras_checks(facts), *cuda_checks(facts),
            *network_checks(facts), *shm_checks(facts), *tool_checks(facts), *single_copy_checks(facts),
            *compile_checks(facts), *slurm_checks(facts), *ray_checks(facts)]


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _run(argv: list[str]) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout + out.stderr if out.returncode == 0 else None


def _nvidia_facts() -> tuple[int, str | None, str | None]:
    if shutil.which("nvidia-smi") is None:
        return 0, None, None
    summary = _run(["nvidia-smi"]) or ""
    driver = re.search(r"Driver Version:\s*([\d.]+)", summary)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", summary)
    return gpu_count(), driver.group(1) if driver else None, cuda.group(1) if cuda else None


def _torch_cuda() -> str | None:
    out = _run([sys.executable, "-c", "import torch; print(torch.version.cuda or '')"])
    return out.strip() or None if out else None


def _horovod_keras_3() -> bool:
    # Read, not imported: importing horovod.tensorflow imports TensorFlow, seconds of start-up.
    spec = importlib.util.find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        return False
    util = os.path.join(list(spec.submodule_search_locations)[0], "tensorflow", "util.py")
    try:
        with open(util) as f:
            return "def var_ref(" in f.read()
    except OSError:
        return False


def _mpi() -> str | None:
    flavor = detect_mpi_flavor()
    if flavor is None:
        return None
    version = re.search(r"(\d+\.\d+(\.\d+)?)", _run(["mpirun", "--version"]) or "")
    return f"{flavor} {version.group(1)}" if version else flavor


def _single_copy() -> tuple[str, str] | None:
    """Open MPI's btl_vader_single_copy_mechanism as its processes here would get it, and its source (default,
    environment, file (PATH:LINE)); None without Open MPI's ompi_info."""
    prefix = "mca:btl:vader:param:btl_vader_single_copy_mechanism:"
    output = _run(["ompi_info", "--parsable", "--level", "3", "--param", "btl", "vader"]) or ""
    fields = dict(line.removeprefix(prefix).split(":", 1) for line in output.splitlines() if line.startswith(prefix))
    return (fields["value"], fields["source"]) if "value" in fields and "source" in fields else None


def _java() -> str | None:
    if shutil.which("java") is None:
        return None
    found = re.search(r'version "([^"]+)"', _run(["java", "-version"]) or "")
    return found.group(1) if found else "found"


def _srun_mpi_plugins() -> tuple[str, ...] | None:
    if shutil.which("srun") is None:
        return None
    listed = _run(["srun", "--mpi=list"])
    if listed is None:  # srun without a cluster's config here
        return None
    return tuple(line.strip() for line in listed.splitlines()
                 if line.startswith(("\t", " ")) and line.strip() and ":" not in line)


def _memlock_bytes() -> int | None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return None if soft == resource.RLIM_INFINITY else soft


def collect_facts(environ: Mapping[str, str]) -> Facts:
    import psutil

    manifest_path = environ.get("TRAINSTACK_MANIFEST", MANIFEST_PATH)
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        manifest = None
    names = set(REPORTED_PACKAGES) | set((manifest or {}).get("packages") or {})
    gpu_count, driver, driver_cuda = _nvidia_facts()
    shm = shutil.disk_usage("/dev/shm").total if os.path.isdir("/dev/shm") else None
    single_copy = _single_copy()
    return Facts(manifest_path, manifest, {name: _installed(name) for name in sorted(names)}, gpu_count, driver,
                 driver_cuda, _torch_cuda() if gpu_count else None, shm, default_route_interface(),
                 tuple(sorted(psutil.net_if_addrs())), _mpi(), _java(), dict(environ),
                 nvidia_smi=shutil.which("nvidia-smi") is not None, horovod_keras_3=_horovod_keras_3(),
                 compile_caches=tuple((variable, directory, noexec_mount(directory))
                                      for variable, directory in compiler_caches(environ)),
                 single_copy=single_copy, cma_refused=cma.refused() if single_copy else None,
                 srun_mpi_plugins=_srun_mpi_plugins(), memlock_bytes=_memlock_bytes(),
                 ray_token_file=token_file_exists())


def format_checks(checks: list[Check]) -> str:
    lines = []
    for check in checks:
        lines.append(f"{check.status.upper() if check.status == 'fail' else check.status:<5} "
                     f"{check.name:<14} {check.detail}")
        if check.hint:
            lines.append(f"{'':<20} -> {check.hint}")
    return "\n".join(lines) + "\n"


def add_parser(sub: Any) -> None:
    """`trainrun doctor` in trainrun's subcommands (trainrun.arguments.build_parser)."""
    doctor = sub.add_parser("doctor", help="preflight checks before training",
                            description="Checks versions, GPU driver, NCCL hints and /dev/shm; exits 1 on a blocker.")
    doctor.add_argument("--json", action="store_true", help="the facts and checks as JSON")


def main(as_json: bool = False) -> int:
    checks = run_checks(collect_facts(os.environ))
    blocking = [c for c in checks if c.status == "fail"]
    if as_json:
        sys.stdout.write(json.dumps({"ok": not blocking, "checks": [asdict(c) for c in checks]}, indent=2) + "\n")
    else:
        sys.stdout.write(format_checks(checks))
        sys.stdout.write(f"{len(blocking)} problem(s) block training\n" if blocking else "ready to train\n")
    return 1 if blocking else 0
