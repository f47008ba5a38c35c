"""Turns a flavor into a Docker build context: the rendered Dockerfile and the files it copies."""
from __future__ import annotations

import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import jinja2
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from trainstack.errors import TrainstackError
from trainstack.matrix import REPO_ROOT, Flavor, MatrixError

IMAGES_DIR = REPO_ROOT / "images"
IMAGE_USER = "trainer"
PROJECT_URL = "https://github.com/trainstack/trainstack"

RUNTIME_APT_PACKAGES = ["python3", "openmpi-bin", "libopenmpi3", "openssh-client", "procps", "tini", "ca-certificates"]
BUILDER_APT_PACKAGES = ["g++", "make", "cmake", "patch", "binutils", "python3-dev", "python3-venv", "libopenmpi-dev"]
# Build tooling inside the image's venv: Horovod builds with --no-build-isolation.
BUILD_TOOL_PACKAGES = {"setuptools": "80.9.0", "wheel": "0.45.1"}
# Framework C++ headers (site-packages relative), used by the Horovod build and left out of the image.
HEADERS_LEFT_IN_BUILDER = ["torch/include", "tensorflow/include"]
# The CUDA headers NVIDIA's wheels carry (the frameworks load only their libraries), left out of GPU images.
CUDA_WHEEL_HEADERS = "nvidia/*/include"
# Triton bundles CUPTI 12 (129 MB) for its profiler: beside the CUDA 12 wheels a second copy, so its
# folder keeps only the name Triton loads, a link to the wheel's file.
TRITON_CUPTI_DIR = "triton/backends/nvidia/lib/cupti"
TRITON_CUPTI_MAJOR = 12
CUDA_WHEEL_CUPTI = "nvidia/cuda_cupti/lib/libcupti.so.12"
LOCAL_PACKAGE_DIRS = {"launcher": "/opt/trainstack/src/launcher", "templates": "/opt/trainstack/src/templates"}
# Pins of NVIDIA's CUDA wheels (python_packages named so) choose the CUDA stack Horovod compiles
# against, so they are installed with the frameworks.
CUDA_WHEEL_PREFIX = "nvidia-"
# Builder-only prefix for nvcc and the link-time names the Horovod build looks for.
CUDA_BUILD_PREFIX = "/opt/cuda-build"
NVIDIA_APT_KEYRING_URL = "https://developer.download.nvidia.com/compute/cuda/repos/debian{debian}/x86_64/cuda-keyring_1.1-1_all.deb"
BUILD_CA_PATH = "/tmp/build-ca/ca-bundle.crt"
BUILD_SCRIPTS_DIR = "/tmp/build/scripts"
# Archive areas of cuda.debian_suite holding the CUDA packages (non-free) and libcu++-dev (main).
DEBIAN_CUDA_COMPONENTS = ["main", "non-free"]
# Written from the installed NVIDIA wheels by images/scripts/nvidia_ld_conf.py.
NVIDIA_LD_CONF = "/etc/ld.so.conf.d/trainstack-nvidia-wheels.conf"


@dataclass(frozen=True)
class SourceOptions:
    """Where the build's pip finds packages; none of it reaches the final image."""

    ca_bundle: Path | None = None
    wheelhouse: Path | None = None
    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)


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
    nccl_link = {f"{CUDA_BUILD_PREFIX}/nccl/libnccl.so": f"{site_packages(flavor)}/nvidia/nccl/lib/libnccl.so.2"}
    source = flavor.field("cuda", "build_tools")
    if source == "pip":
        home = f"{CUDA_BUILD_PREFIX}/nvidia/cu{cuda.major}"
        return CudaBuild(
            home=home,
            pip_requirements=[f"cuda-toolkit[nvcc,cccl]=={flavor.field('cuda', 'toolkit')}"],
            # CMake looks for the toolkit's libraries in lib64, and for libcudart.so to link it shared.
            links={f"{home}/lib64": "lib", f"{home}/lib/libcudart.so": f"libcudart.so.{cuda.major}", **nccl_link},
            kernel_check_command=_kernel_check_command(flavor, f"{home}/bin/cuobjdump"),
        )
    if source == "debian":
        home = f"{CUDA_BUILD_PREFIX}/debian-cuda"
        # lib64/libcudart.so, which torch's extension build links, is the frameworks' libcudart.
        cudart = f"{site_packages(flavor)}/nvidia/cuda_runtime/lib/libcudart.so.{cuda.major}"
        return CudaBuild(
            home=home,
            debian_toolkit_command=_debian_toolkit_command(flavor, home, cudart),
            links=nccl_link,
            kernel_check_command=_kernel_check_command(flavor, f"{home}/bin/cuobjdump"),
        )
    if source == "apt":
        package_suffix = f"{cuda.major}-{cuda.minor}"
        home = f"/usr/local/cuda-{cuda.major}.{cuda.minor}"
        return CudaBuild(
            home=home,
            apt_keyring_url=NVIDIA_APT_KEYRING_URL.format(debian=flavor.version("debian")),
            apt_packages=[f"cuda-nvcc-{package_suffix}", f"cuda-cudart-dev-{package_suffix}",
                          f"cuda-cuobjdump-{package_suffix}"],
            links=nccl_link,
            kernel_check_command=_kernel_check_command(flavor, f"{home}/bin/cuobjdump"),
        )
    raise MatrixError(f"matrix: flavor {flavor.name!r} has cuda.build_tools {source!r}; expected pip, debian or apt")


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
        "--architectures", ",".join(str(cc) for cc in architectures), f"{site_packages(flavor)}/horovod",
    ])


def site_packages(flavor: Flavor) -> str:
    return f"/opt/venv/lib/python{flavor.version('python')}/site-packages"


def framework_requirements(flavor: Flavor) -> list[str]:
    """What Horovod compiles against, installed before it: build tools, torch, TensorFlow, CUDA wheel pins."""
    lines = [f"{name}=={version}" for name, version in BUILD_TOOL_PACKAGES.items()]
    lines.append(f"torch=={flavor.version('torch')}")
    if "tensorflow" in flavor.components:
        package = flavor.field("tensorflow", "pip_package") or "tensorflow"
        extras = "[and-cuda]" if flavor.gpu else ""
        lines.append(f"{package}{extras}=={flavor.version('tensorflow')}")
    lines += [f"{name}=={version}" for name, version in sorted(flavor.python_packages.items())
              if name.startswith(CUDA_WHEEL_PREFIX)]
    return lines


def library_requirements(flavor: Flavor) -> list[str]:
    """Everything else, installed after the Horovod build so a pin change here does not recompile it."""
    lines = [f"pyspark=={flavor.version('pyspark')}"]
    lines += [f"{name}=={version}" for name, version in sorted(flavor.python_packages.items())
              if name not in flavor.no_deps_packages and not name.startswith(CUDA_WHEEL_PREFIX)]
    lines += [f"{name}" for name in _local_package_dependencies()]
    return lines


def no_deps_requirements(flavor: Flavor) -> list[str]:
    """Packages installed after the others without their dependencies (see matrix `no_deps`)."""
    return [f"{name}=={flavor.python_packages[name]}" for name in sorted(flavor.no_deps_packages)]


def horovod_build_env(flavor: Flavor) -> dict[str, str]:
    """HOROVOD_* variables that make every wanted extension a hard requirement of the build."""
    frameworks = flavor.field("horovod", "frameworks") or []
    controllers = flavor.field("horovod", "controllers") or []
    env = {f"HOROVOD_WITH_{name.upper()}": "1" for name in [*frameworks, *controllers]}
    for name in ("pytorch", "tensorflow", "mxnet"):
        if name not in frameworks:
            env[f"HOROVOD_WITHOUT_{name.upper()}"] = "1"
    if flavor.field("horovod", "gpu_operations"):
        env["HOROVOD_GPU_OPERATIONS"] = str(flavor.field("horovod", "gpu_operations")).upper()
    if flavor.field("horovod", "cuda_architectures"):
        env["HOROVOD_BUILD_CUDA_CC_LIST"] = ",".join(str(cc) for cc in flavor.field("horovod", "cuda_architectures"))
    build = cuda_build(flavor)
    if build:
        env.update({
            "HOROVOD_CUDA_HOME": build.home,
            # Horovod's FindPytorch counts torch as a CUDA build only when torch.utils.cpp_extension finds CUDA_HOME.
            "CUDA_HOME": build.home,
            # Link the libcudart.so and libnccl.so.2 the frameworks load rather than static copies.
            "HOROVOD_CUDA_RUNTIME_LIBRARY": "Shared",
            "HOROVOD_NCCL_LINK": "SHARED",
            "HOROVOD_NCCL_INCLUDE": f"{site_packages(flavor)}/nvidia/nccl/include",
            "HOROVOD_NCCL_LIB": f"{CUDA_BUILD_PREFIX}/nccl",
        })
    return env


def bundled_cuda_copy_cleanup(flavor: Flavor) -> list[str]:
    """Shell commands (quoted), run in site-packages, that replace a package's bundled copy of a CUDA wheel's library."""
    if not flavor.gpu or Version(str(flavor.version("cuda"))).major != TRITON_CUPTI_MAJOR:
        return []
    link_to_site_packages = "../" * len(PurePosixPath(TRITON_CUPTI_DIR).parts)
    return [
        shlex.join(["rm", "-rf", TRITON_CUPTI_DIR]),
        shlex.join(["mkdir", TRITON_CUPTI_DIR]),
        shlex.join(["ln", "-s", f"{link_to_site_packages}{CUDA_WHEEL_CUPTI}", f"{TRITON_CUPTI_DIR}/libcupti.so"]),
    ]


def horovod_patches(flavor: Flavor) -> list[str]:
    """The matrix's horovod `patch`: one file name or a list of them, applied in order."""
    patches = flavor.field("horovod", "patch") or []
    return [patches] if isinstance(patches, str) else list(patches)


def pip_source_env(sources: SourceOptions, flavor: Flavor) -> dict[str, str]:
    env = {"PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_FIND_LINKS": "/tmp/wheelhouse"}
    if sources.index_url:
        env["PIP_INDEX_URL"] = sources.index_url
    torch_index = flavor.field("torch", "index_url")
    if _wheelhouse_has(sources.wheelhouse, "torch", flavor.version("torch")):
        torch_index = None
    extra = sources.extra_index_urls or [url for url in [torch_index] if url]
    if extra:
        env["PIP_EXTRA_INDEX_URL"] = " ".join(extra)
    return env


def labels(flavor: Flavor) -> dict[str, str]:
    components = {f"io.trainstack.{name}.version": str(spec["version"]) for name, spec in flavor.components.items()}
    return {
        "org.opencontainers.image.title": f"trainstack {flavor.name}",
        "org.opencontainers.image.description": flavor.description,
        "org.opencontainers.image.source": PROJECT_URL,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.base.name": flavor.base_image,
        "io.trainstack.flavor": flavor.name,
        **components,
    }


def render_dockerfile(flavor: Flavor, sources: SourceOptions = SourceOptions()) -> str:
    java_package = flavor.field("java", "apt_package")
    context = {
        "flavor": flavor.name,
        "base_image": flavor.base_image,
        "runtime_apt_packages": [*RUNTIME_APT_PACKAGES, java_package],
        "builder_apt_packages": BUILDER_APT_PACKAGES,
        "ca_bundle": sources.ca_bundle is not None,
        "cuda_build": cuda_build(flavor),
        "cuda_build_prefix": CUDA_BUILD_PREFIX,
        "build_ca": BUILD_CA_PATH if sources.ca_bundle else None,
        "nvidia_ld_conf": NVIDIA_LD_CONF if flavor.gpu else None,
        "builder_env": pip_source_env(sources, flavor),
        "no_deps_requirements": bool(flavor.no_deps_packages),
        "horovod_version": flavor.version("horovod"),
        "horovod_patches": horovod_patches(flavor),
        "horovod_build_env": horovod_build_env(flavor),
        "headers_left_in_builder": [*HEADERS_LEFT_IN_BUILDER, *([CUDA_WHEEL_HEADERS] if flavor.gpu else [])],
        "bundled_cuda_copy_cleanup": bundled_cuda_copy_cleanup(flavor),
        "runtime_env": runtime_env(),
        "local_packages": list(LOCAL_PACKAGE_DIRS.values()),
        "labels": labels(flavor),
        "user": IMAGE_USER,
    }
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(IMAGES_DIR),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return environment.get_template("Dockerfile.j2").render(context)


def runtime_env() -> dict[str, str]:
    return {
        "PATH": "/opt/venv/bin:$PATH",
        "PYSPARK_PYTHON": "/opt/venv/bin/python",
        "PYSPARK_DRIVER_PYTHON": "/opt/venv/bin/python",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }


def write_build_context(flavor: Flavor, sources: SourceOptions, out_dir: Path) -> Path:
    """Writes the rendered Dockerfile and everything it copies into out_dir (replaced if present)."""
    check_sources(flavor, sources)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    (out_dir / "Dockerfile").write_text(render_dockerfile(flavor, sources))
    (out_dir / "requirements-frameworks.txt").write_text("\n".join(framework_requirements(flavor)) + "\n")
    (out_dir / "requirements-libraries.txt").write_text("\n".join(library_requirements(flavor)) + "\n")
    (out_dir / "requirements-no-deps.txt").write_text("".join(f"{line}\n" for line in no_deps_requirements(flavor)))
    (out_dir / "patches").mkdir()
    for patch in horovod_patches(flavor):
        shutil.copyfile(IMAGES_DIR / "patches" / patch, out_dir / "patches" / patch)
    shutil.copytree(IMAGES_DIR / "scripts", out_dir / "scripts", ignore=_ignore_build_debris)
    shutil.copytree(REPO_ROOT / "launcher", out_dir / "launcher", ignore=_ignore_build_debris)
    shutil.copytree(REPO_ROOT / "examples", out_dir / "examples", ignore=_ignore_build_debris)
    shutil.copytree(REPO_ROOT / "templates", out_dir / "templates", ignore=_ignore_build_debris)
    wheelhouse = out_dir / "wheelhouse"
    wheelhouse.mkdir()
    if sources.wheelhouse:
        for wheel in sorted(sources.wheelhouse.glob("*.whl")):
            _link_or_copy(wheel, wheelhouse / wheel.name)
    if sources.ca_bundle:
        (out_dir / "build-ca").mkdir()
        shutil.copyfile(sources.ca_bundle, out_dir / "build-ca" / "ca-bundle.crt")
    return out_dir


def check_sources(flavor: Flavor, sources: SourceOptions) -> None:
    """Refuses build options that cannot work, before any docker step."""
    if sources.ca_bundle is not None and not sources.ca_bundle.is_file():
        raise TrainstackError(f"--ca-bundle: {sources.ca_bundle} is not a file; give a PEM bundle such as /etc/ssl/certs/ca-certificates.crt")
    if sources.wheelhouse is not None:
        if not sources.wheelhouse.is_dir():
            raise TrainstackError(f"--wheelhouse: {sources.wheelhouse} is not a directory; give a folder of .whl files")
        if not any(sources.wheelhouse.glob("*.whl")):
            raise TrainstackError(f"--wheelhouse: {sources.wheelhouse} holds no .whl files")
        if flavor.gpu:
            _refuse_foreign_torch_builds(flavor, sources.wheelhouse)


def _refuse_foreign_torch_builds(flavor: Flavor, wheelhouse: Path) -> None:
    """A GPU flavor's pip must never take a CPU (or other CUDA) torch from the wheelhouse.

    pip lets `torch==2.13.0` match `2.13.0+cpu`, so such a wheel would silently replace the CUDA build.
    """
    cuda = Version(str(flavor.version("cuda")))
    wanted_label = f"cu{cuda.major}{cuda.minor}"
    for wheel in sorted(wheelhouse.glob("torch-*.whl")):
        try:
            _, version, _, _ = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        if version.local and version.local != wanted_label:
            raise TrainstackError(
                f"--wheelhouse: {wheel} is torch {version}, not a CUDA {cuda} build; the {flavor.name} flavor "
                f"refuses it (pip would take it for torch=={version.public}). Build {flavor.name} without "
                f"--wheelhouse (unset TRAINSTACK_WHEELHOUSE), or give a folder without that wheel"
            )


def _local_package_dependencies() -> list[str]:
    """Runtime dependencies declared by launcher/ and templates/, installed with the frameworks."""
    import tomllib

    names: list[str] = []
    for name in LOCAL_PACKAGE_DIRS:
        pyproject = REPO_ROOT / name / "pyproject.toml"
        names += tomllib.loads(pyproject.read_text())["project"].get("dependencies", [])
    return sorted(set(names))


def _wheelhouse_has(wheelhouse: Path | None, name: str, version: str | None) -> bool:
    """True when the wheelhouse holds a wheel of name==version (then its own index is not needed)."""
    if wheelhouse is None or version is None:
        return False
    return any(wheelhouse.glob(f"{name}-{version}-*.whl"))


def _ignore_build_debris(directory: str, names: list[str]) -> set[str]:
    return {name for name in names if name in {"__pycache__", "build", "dist"} or name.endswith(".egg-info")}


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        target.hardlink_to(source)
    except OSError:
        shutil.copyfile(source, target)
