"""The builder stage as components, each one interface: its steps (images/components/NAME.j2, rendered with the
values computed here), the patch files it applies, the build-context files its steps copy or read, and the venv
layers its distributions end up in. `build_components` gives a flavor's components in build order; the Dockerfile
renders each one's steps in turn, and the build context and its build record take files and patches from the same
objects. The CUDA build tools (cuda_build.py) and DeepSpeed (deepspeed_build.py) feed their components here."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from packaging.requirements import Requirement

from trainrun import image_contract
from trainstack.image import cuda_build, deepspeed_build
from trainstack.image.matrix import Flavor, component_patches
from trainstack.image.requirements import framework_requirements, library_requirements, no_deps_requirements
from trainstack.image.sources import BUILD_CA_PATH, SourceOptions, pip_source_env

# The folder of images/ that holds each component's steps, a Jinja fragment named after it.
FRAGMENTS_DIR = "components"
# Framework C++ headers (site-packages relative), used by the Horovod build and left out of the image;
# torch/include stays, since Inductor compiles against it.
HEADERS_LEFT_IN_BUILDER = ("tensorflow/include",)


@dataclass(frozen=True)
class BuildComponent:
    """One part of the builder stage: what its steps read, apply, copy and install."""

    name: str
    # What its fragment reads as `values`; words of the matrix go through the fragment's `shell` filter, or are
    # shell lines quoted here.
    values: Mapping[str, Any] = field(default_factory=dict)
    # Files of images/patches/, in the order its steps apply them.
    patches: tuple[str, ...] = ()
    # Files of images/ its steps COPY, at the same path in the build context (scripts/NAME.py).
    files: tuple[str, ...] = ()
    # Build-context files written for its steps from the flavor (its pip requirements): {name: text}.
    written_files: Mapping[str, str] = field(default_factory=dict)
    # The distributions its steps install by name (pip adds their dependencies), and the venv layers
    # (images/matrix.yaml) that take them.
    distributions: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()
    # What the builder's last steps remove from site-packages before the venv is split into layers: paths (globs)
    # of its install that only the builder needs, and shell lines (quoted) that replace a bundled copy of a library.
    left_in_builder: tuple[str, ...] = ()
    site_packages_cleanup: tuple[str, ...] = ()

    @property
    def template(self) -> str:
        """Its steps, relative to images/."""
        return f"{FRAGMENTS_DIR}/{self.name}.j2"


def build_components(flavor: Flavor, sources: SourceOptions = SourceOptions()) -> list[BuildComponent]:
    """The flavor's components in the order the builder runs their steps: each after what it builds against, and
    the ones that change most often (patched sources, library pins) late, so a change rebuilds only from there."""
    cuda = cuda_build.cuda_build(flavor)
    deepspeed = deepspeed_build.deepspeed_build(flavor)
    components = [
        # Before the venv: nvcc from apt packages, so a build that cannot get them stops first.
        *([_cuda_toolkit(cuda, sources)] if cuda else []),
        _venv(flavor, sources),
        # nvcc from NVIDIA's wheels needs the venv's pip and the build's indexes.
        *([_cuda_toolkit_wheels(cuda)] if cuda and cuda.pip_requirements else []),
        _frameworks(flavor),
        *([_cuda_links(cuda)] if cuda else []),
        _horovod(flavor, cuda),
        _libraries(flavor),
        *([_deepspeed(flavor, deepspeed)] if deepspeed else []),
        *([_pyspark(flavor)] if component_patches(flavor, "pyspark") else []),
        *([_ray(flavor)] if flavor.version("ray") else []),
    ]
    return [replace(component, layers=tuple(dict.fromkeys(
        flavor.venv_layer_of(name).name for name in component.distributions))) for component in components]


def _requirement_names(lines: Iterable[str]) -> tuple[str, ...]:
    return tuple(Requirement(line).name for line in lines)


def _cuda_toolkit(cuda: cuda_build.CudaBuild, sources: SourceOptions) -> BuildComponent:
    """The CUDA build's scripts, and nvcc with the CUDA headers from Debian's or NVIDIA's apt packages into a
    builder-only prefix (from NVIDIA's wheels: cuda-toolkit-wheels)."""
    return BuildComponent(
        "cuda-toolkit",
        values={"debian_toolkit_command": cuda.debian_toolkit_command, "apt_keyring_url": cuda.apt_keyring_url,
                "apt_packages": cuda.apt_packages, "build_ca": BUILD_CA_PATH if sources.ca_bundle else None},
        files=tuple(f"scripts/{script}" for script in cuda.scripts))


def _venv(flavor: Flavor, sources: SourceOptions) -> BuildComponent:
    """The image's venv, and where the builder's pip finds packages (indexes, the wheelhouse)."""
    return BuildComponent("venv", values={"pip_env": pip_source_env(sources, flavor), "venv": image_contract.VENV_DIR},
                          distributions=("pip",))


def _cuda_toolkit_wheels(cuda: cuda_build.CudaBuild) -> BuildComponent:
    return BuildComponent("cuda-toolkit-wheels",
                          values={"prefix": cuda_build.CUDA_BUILD_PREFIX, "requirements": cuda.pip_requirements})


def _frameworks(flavor: Flavor) -> BuildComponent:
    """What Horovod compiles against: torch, TensorFlow and the CUDA wheels; their C++ headers stay in the builder."""
    requirements = framework_requirements(flavor)
    return BuildComponent(
        "frameworks", written_files={"requirements-frameworks.txt": "\n".join(requirements) + "\n"},
        distributions=_requirement_names(requirements),
        left_in_builder=(*HEADERS_LEFT_IN_BUILDER, *([cuda_build.CUDA_WHEEL_HEADERS] if flavor.gpu else [])),
        site_packages_cleanup=tuple(cuda_build.bundled_cuda_copy_cleanup(flavor)))


def _cuda_links(cuda: cuda_build.CudaBuild) -> BuildComponent:
    """The names Horovod links against, and the loader's paths to the frameworks' CUDA wheels."""
    return BuildComponent("cuda-links", values={"link_dirs": cuda.link_dirs, "links": cuda.links,
                                                "ld_conf": cuda_build.NVIDIA_LD_CONF})


def _horovod(flavor: Flavor, cuda: cuda_build.CudaBuild | None) -> BuildComponent:
    """Horovod from its sdist, patched, compiled against the frameworks with every wanted extension required."""
    return BuildComponent(
        "horovod", values={"version": flavor.version("horovod"), "build_env": horovod_build_env(flavor),
                           "kernel_check_command": cuda.kernel_check_command if cuda else None},
        patches=tuple(component_patches(flavor, "horovod")), distributions=("horovod",))


# For the extensions the builder compiles (Horovod's, DeepSpeed's ops): no GNU build ID. The ID is a hash of the
# library as linked, whose symbol and debug sections differ between two builds of the torch extensions; stripping
# removes those sections but not the ID, which left it the only bytes that differed.
NO_BUILD_ID = {"LDFLAGS": "-Wl,--build-id=none"}
# CMake 4 (what `pip install cmake` gives) refuses a cmake_minimum_required below 3.5, and Horovod 0.28.1's bundled
# Gloo asks for 2.8.12 ("Compatibility with CMake < 3.5 has been removed from CMake"). CMake 4 reads this variable
# from the environment and raises such minimums to 3.5; CMake 3.x, bookworm's 3.25 in the builder, ignores it, so
# the image builds as before. Patching Gloo's minimum instead would change its policies under CMake 3.25 too.
CMAKE_4_POLICY_MINIMUM = {"CMAKE_POLICY_VERSION_MINIMUM": "3.5"}


def horovod_build_env(flavor: Flavor) -> dict[str, str]:
    """HOROVOD_* variables that make every wanted extension a hard requirement of the build, NO_BUILD_ID, and what
    lets CMake 4 configure the bundled Gloo."""
    frameworks = flavor.field("horovod", "frameworks") or []
    controllers = flavor.field("horovod", "controllers") or []
    env = {**NO_BUILD_ID, **CMAKE_4_POLICY_MINIMUM,
           **{f"HOROVOD_WITH_{name.upper()}": "1" for name in [*frameworks, *controllers]}}
    for name in ("pytorch", "tensorflow", "mxnet"):
        if name not in frameworks:
            env[f"HOROVOD_WITHOUT_{name.upper()}"] = "1"
    if flavor.field("horovod", "gpu_operations"):
        env["HOROVOD_GPU_OPERATIONS"] = str(flavor.field("horovod", "gpu_operations")).upper()
    if flavor.field("horovod", "cuda_architectures"):
        env["HOROVOD_BUILD_CUDA_CC_LIST"] = ",".join(str(cc) for cc in flavor.field("horovod", "cuda_architectures"))
    build = cuda_build.cuda_build(flavor)
    if build:
        env.update({
            "HOROVOD_CUDA_HOME": build.home,
            # Horovod's FindPytorch counts torch as a CUDA build only when torch.utils.cpp_extension finds CUDA_HOME.
            "CUDA_HOME": build.home,
            # Link the libcudart.so and libnccl.so.2 the frameworks load rather than static copies.
            "HOROVOD_CUDA_RUNTIME_LIBRARY": "Shared",
            "HOROVOD_NCCL_LINK": "SHARED",
            "HOROVOD_NCCL_INCLUDE": f"{flavor.site_packages}/nvidia/nccl/include",
            "HOROVOD_NCCL_LIB": f"{cuda_build.CUDA_BUILD_PREFIX}/nccl",
        })
    return env


def _libraries(flavor: Flavor) -> BuildComponent:
    """Every other pin, after the Horovod build so that a pin change does not recompile it."""
    requirements, no_deps = library_requirements(flavor), no_deps_requirements(flavor)
    return BuildComponent(
        "libraries", values={"no_deps": bool(no_deps)},
        written_files={"requirements-libraries.txt": "\n".join(requirements) + "\n",
                       "requirements-no-deps.txt": "".join(f"{line}\n" for line in no_deps)},
        distributions=_requirement_names([*requirements, *no_deps]))


def _deepspeed(flavor: Flavor, build: deepspeed_build.DeepSpeedBuild) -> BuildComponent:
    return BuildComponent(
        "deepspeed", values={"version": build.version, "source_dir": build.source_dir,
                             "env": {**build.env, **NO_BUILD_ID}, "check_command": build.check_command,
                             "build_dir": deepspeed_build.BUILD_DIR, "constraints": deepspeed_build.CONSTRAINTS},
        patches=tuple(component_patches(flavor, "deepspeed")),
        files=(f"scripts/{deepspeed_build.CHECK_SCRIPT}",), distributions=("deepspeed",))


def _pyspark(flavor: Flavor) -> BuildComponent:
    """PySpark's patches, applied where the libraries' pip installed it (and to the zip Spark's workers import)."""
    return BuildComponent("pyspark", values={"site_packages": flavor.site_packages},
                          patches=tuple(component_patches(flavor, "pyspark")),
                          files=("scripts/sync_pyspark_zip.py",), distributions=("pyspark",))


def _ray(flavor: Flavor) -> BuildComponent:
    """Ray with its extras under a constraints file of everything installed so far (it replaces none of the
    libraries' pins), then its patches where pip installed it."""
    extras = ",".join(flavor.field("ray", "extras"))
    return BuildComponent("ray", values={"requirement": f"ray[{extras}]=={flavor.version('ray')}",
                                         "site_packages": flavor.site_packages,
                                         "constraints": "/tmp/build/ray-constraints.txt"},
                          patches=tuple(component_patches(flavor, "ray")), distributions=("ray",))
