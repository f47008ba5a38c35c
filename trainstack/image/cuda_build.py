"""How a GPU flavor's builder gets nvcc and the CUDA headers for Horovod (NVIDIA's wheels, Debian's packages
or NVIDIA's apt repository), and keeps the image to one copy of each CUDA library; no toolkit reaches the image."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from packaging.version import Version

from trainstack.image.matrix import Flavor, MatrixError

# The CUDA headers NVIDIA's wheels carry (the frameworks load only their libraries), left out of GPU images.
CUDA_WHEEL_HEADERS = "nvidia/*/include"
# Triton bundles CUPTI for its profiler: CUPTI 12 (129 MB) in `cupti` and, from Triton 3.9, CUPTI 13 (150 MB) in
# `cupti-blackwell`, which its profiler loads on sm_100 and later. Beside the CUDA wheels each is a second copy, or a
# CUPTI of another CUDA than the image's, so each such folder keeps only the name Triton's profiler loads, a link to
# the CUPTI wheel of the image's CUDA major (the one torch's profiler loads).
# {CUDA major: (Triton's folders, the CUPTI wheel's file)}
TRITON_CUPTI = {12: (("triton/backends/nvidia/lib/cupti",), "nvidia/cuda_cupti/lib/libcupti.so.12"),
                13: (("triton/backends/nvidia/lib/cupti", "triton/backends/nvidia/lib/cupti-blackwell"),
                     "nvidia/cu13/lib/libcupti.so.13")}
# Builder-only prefix for nvcc and the link-time names the Horovod build looks for.
CUDA_BUILD_PREFIX = "/opt/cuda-build"
NVIDIA_APT_KEYRING_URL = "https://developer.download.nvidia.com/compute/cuda/repos/debian{debian}/x86_64/cuda-keyring_1.1-1_all.deb"
BUILD_SCRIPTS_DIR = "/tmp/build/scripts"
# Archive areas of cuda.debian_suite holding the CUDA packages (non-free) and libcu++-dev (main).
DEBIAN_CUDA_COMPONENTS = ["main", "non-free"]
# Written from the installed NVIDIA wheels by images/scripts/nvidia_ld_conf.py.
NVIDIA_LD_CONF = "/etc/ld.so.conf.d/trainstack-nvidia-wheels.conf"


@dataclass(frozen=True)
class CudaBuild:
    """Where the builder stage gets nvcc and the CUDA headers for Horovod; none of it reaches the image."""

    home: str
    pip_requirements: list[str] = field(default_factory=list)
    apt_keyring_url: str | None = None
    apt_packages: list[str] = field(default_factory=list)
    # The shell line (quoted) that fetches and unpacks the toolkit from Debian packages.
    debian_toolkit_command: str | None = None
    links: dict[str, str] = field(default_factory=dict)
    # The shell line (quoted) that checks Horovod's kernels with cuobjdump, when the matrix names architectures.
    kernel_check_command: str | None = None

    @property
    def link_dirs(self) -> list[str]:
        return sorted({str(PurePosixPath(path).parent) for path in self.links})

    @property
    def scripts(self) -> list[str]:
        scripts = ["nvidia_ld_conf.py"]
        if self.apt_packages:
            scripts.insert(0, "nvidia_apt_keyring.py")
        if self.debian_toolkit_command:
            scripts.insert(0, "debian_cuda_toolkit.py")
        if self.kernel_check_command:
            scripts.append("check_cuda_kernels.py")
        return scripts


def cuda_build(flavor: Flavor) -> CudaBuild | None:
    """nvcc from PyPI's wheels (CUDA 13), Debian's packages or NVIDIA's apt repository (CUDA 12 wheels hold no nvcc)."""
    if not flavor.gpu:
        return None
    cuda = Version(str(flavor.version("cuda")))
    # find_library(nccl) wants libnccl.so; the link lives outside the venv, so the image keeps one libnccl file.
    nccl_link = {f"{CUDA_BUILD_PREFIX}/nccl/libnccl.so": f"{flavor.site_packages}/nvidia/nccl/lib/libnccl.so.2"}
    source = flavor.field("cuda", "build_tools")
    if source == "pip":
        home = f"{CUDA_BUILD_PREFIX}/nvidia/cu{cuda.major}"
        fields = {
            "pip_requirements": [f"cuda-toolkit[nvcc,cccl]=={flavor.field('cuda', 'toolkit')}"],
            # CMake looks for the toolkit's libraries in lib64, and for libcudart.so to link it shared.
            "links": {f"{home}/lib64": "lib", f"{home}/lib/libcudart.so": f"libcudart.so.{cuda.major}", **nccl_link},
        }
    elif source == "debian":
        home = f"{CUDA_BUILD_PREFIX}/debian-cuda"
        # lib64/libcudart.so, which torch's extension build links, is the frameworks' libcudart.
        cudart = f"{flavor.site_packages}/nvidia/cuda_runtime/lib/libcudart.so.{cuda.major}"
        fields = {"debian_toolkit_command": _debian_toolkit_command(flavor, home, cudart), "links": nccl_link}
    elif source == "apt":
        package_suffix = f"{cuda.major}-{cuda.minor}"
        home = f"/usr/local/cuda-{cuda.major}.{cuda.minor}"
        fields = {
            "apt_keyring_url": NVIDIA_APT_KEYRING_URL.format(debian=flavor.version("debian")),
            "apt_packages": [f"cuda-nvcc-{package_suffix}", f"cuda-cudart-dev-{package_suffix}",
                             f"cuda-cuobjdump-{package_suffix}"],
            "links": nccl_link,
        }
    else:
        raise MatrixError(f"matrix: flavor {flavor.name!r} has cuda.build_tools {source!r}; expected pip, debian or apt")
    return CudaBuild(home=home, kernel_check_command=_kernel_check_command(flavor, f"{home}/bin/cuobjdump"), **fields)


def _debian_toolkit_command(flavor: Flavor, home: str, cudart: str) -> str:
    packages = flavor.field("cuda", "debian_packages") or {}
    mirror, suite = flavor.field("cuda", "debian_mirror"), flavor.field("cuda", "debian_suite")
    if not (packages and mirror and suite):
        raise MatrixError(f"matrix: flavor {flavor.name!r} has cuda.build_tools debian; it needs cuda.debian_mirror, "
                          "cuda.debian_suite and cuda.debian_packages (name: version)")
    return shlex.join([
        "python3", f"{BUILD_SCRIPTS_DIR}/debian_cuda_toolkit.py", "--mirror", str(mirror), "--suite", str(suite),
        "--components", *DEBIAN_CUDA_COMPONENTS, "--home", home, "--cudart", cudart,
        *[f"{name}={version}" for name, version in packages.items()],
    ])


def _kernel_check_command(flavor: Flavor, cuobjdump: str) -> str | None:
    architectures = flavor.field("horovod", "cuda_architectures")
    if not architectures:
        return None
    return shlex.join([
        "python", f"{BUILD_SCRIPTS_DIR}/check_cuda_kernels.py", "--cuobjdump", cuobjdump,
        "--architectures", ",".join(str(cc) for cc in architectures), f"{flavor.site_packages}/horovod",
    ])


def bundled_cuda_copy_cleanup(flavor: Flavor) -> list[str]:
    """Shell commands (quoted), run in site-packages, that replace a package's bundled copy of a CUDA wheel's library."""
    major = Version(str(flavor.version("cuda"))).major if flavor.gpu else None
    folders, wheel_file = TRITON_CUPTI.get(major, ((), ""))
    commands = []
    for folder in folders:
        link_to_site_packages = "../" * len(PurePosixPath(folder).parts)
        commands += [shlex.join(["rm", "-rf", folder]), shlex.join(["mkdir", folder]),
                     shlex.join(["ln", "-s", f"{link_to_site_packages}{wheel_file}", f"{folder}/libcupti.so"])]
    return commands
