"""The builder stages as components, each one interface: its steps (images/components/NAME.j2, rendered with the
values computed here), the patch files it applies, the build-context files its steps copy or read, and the venv
layers its distributions end up in. `build_components` gives a flavor's components in build order and
`builder_stages` places them in the Dockerfile's stages: what everything builds against in `frameworks`, each
compiled component in a stage of its own from there (so that BuildKit compiles them at once, beside the builder's
library installs), and the rest, with each compiled component's install step, in `builder`. The build context and its
build record take files and patches from the same objects. The CUDA build tools (cuda_build.py) and DeepSpeed
(deepspeed_build.py) feed their components here."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from packaging.requirements import Requirement

from trainrun import image_contract
from trainstack.image import cuda_build, deepspeed_build
from trainstack.image.matrix import Flavor, component_patches
from trainstack.image.requirements import framework_requirements, library_requirements, no_deps_requirements
from trainstack.image.sources import BUILD_CA_PATH, PIP_NO_CACHE_DIR, SourceOptions, pip_source_env

# The folder of images/ that holds each component's steps, a Jinja fragment named after it; a compiled component's
# install step in the builder is the fragment NAME-install.j2.
FRAGMENTS_DIR = "components"
INSTALL_FRAGMENT_SUFFIX = "-install"
# The stage the compiled components start from, and the one that installs everything and splits the venv.
FRAMEWORKS_STAGE = "frameworks"
BUILDER_STAGE = "builder"
# Where a compiled component's stage installs it (pip's --root): the venv's own paths under this folder, which the
# builder copies into / before pip adds the component's dependencies.
COMPILED_ROOT = "/tmp/build/{name}-root"
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
    # The stage its steps run in: FRAMEWORKS_STAGE, BUILDER_STAGE, or its own name for a compiled component, whose
    # stage starts from FRAMEWORKS_STAGE and whose install step (install_template) runs in BUILDER_STAGE.
    stage: str = BUILDER_STAGE

    @property
    def template(self) -> str:
        """Its steps, relative to images/."""
        return f"{FRAGMENTS_DIR}/{self.name}.j2"

    @property
    def compiled(self) -> bool:
        return self.stage not in (FRAMEWORKS_STAGE, BUILDER_STAGE)

    @property
    def install_template(self) -> str:
        return f"{FRAGMENTS_DIR}/{self.name}{INSTALL_FRAGMENT_SUFFIX}.j2"


@dataclass(frozen=True)
class BuildStage:
    """A stage of the Dockerfile made of components' steps: its name, the stage it starts from, and each step's
    component with the fragment it renders."""

    name: str
    base: str
    steps: tuple[tuple[BuildComponent, str], ...]


def builder_stages(components: list[BuildComponent]) -> list[BuildStage]:
    """`frameworks`, then each compiled component's stage, then `builder`: the components in their stages, in build
    order, a compiled component's install step in `builder`."""
    return [
        BuildStage(FRAMEWORKS_STAGE, "runtime-os",
                   tuple((component, component.template) for component in components
                         if component.stage == FRAMEWORKS_STAGE)),
        *(BuildStage(component.name, FRAMEWORKS_STAGE, ((component, component.template),))
          for component in components if component.compiled),
        BuildStage(BUILDER_STAGE, FRAMEWORKS_STAGE,
                   tuple((component, component.install_template if component.compiled else component.template)
                         for component in components if component.stage == BUILDER_STAGE or component.compiled)),
    ]


def build_components(flavor: Flavor, sources: SourceOptions = SourceOptions(),
                     cache_mounts: bool = False) -> list[BuildComponent]:
    """The flavor's components in the order the builder runs their steps: each after what it builds against, and
    the ones that change most often (patched sources, library pins) after the frameworks, so a change rebuilds only
    from there. The compiled ones (Horovod, DeepSpeed) build in stages of their own from the frameworks, so a
    library pin never recompiles them, and their install steps come last, so the libraries install meanwhile. `cache_mounts`: pip's steps keep its cache in a BuildKit cache mount, so it is not disabled."""
    cuda = cuda_build.cuda_build(flavor)
    deepspeed = deepspeed_build.deepspeed_build(flavor)
    components = [
        # Before the venv: nvcc from apt packages, so a build that cannot get them stops first.
        *([replace(_cuda_toolkit(cuda, sources), stage=FRAMEWORKS_STAGE)] if cuda else []),
        replace(_venv(flavor, sources, cache_mounts), stage=FRAMEWORKS_STAGE),
        # nvcc from NVIDIA's wheels needs the venv's pip and the build's indexes.
        *([replace(_cuda_toolkit_wheels(cuda), stage=FRAMEWORKS_STAGE)] if cuda and cuda.pip_requirements else []),
        replace(_frameworks(flavor), stage=FRAMEWORKS_STAGE),
        *([replace(_cuda_links(cuda), stage=FRAMEWORKS_STAGE)] if cuda else []),
        # What does not need the compiled components first, so that BuildKit installs it while they compile; each
        # compiled component's install step (builder_stages) waits for its stage.
        _libraries(flavor),
        *([_pyspark(flavor)] if component_patches(flavor, "pyspark") else []),
        *([_ray(flavor)] if flavor.version("ray") else []),
        _horovod(flavor, cuda),
        *([_deepspeed(flavor, deepspeed)] if deepspeed else []),
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


# The builder's pip writes no pyc: venv_layers.py writes every one once, checked-hash, after the last install (pip's
# own were compiled again there). PIP_COMPILE=0 and not PIP_NO_COMPILE=1, which pip reads as compile = 1.
NO_PIP_PYCS = {"PIP_COMPILE": "0"}


def _venv(flavor: Flavor, sources: SourceOptions, cache_mounts: bool) -> BuildComponent:
    """The image's venv, and where the builder's pip finds packages (indexes, the wheelhouse) and that it writes no
    pycs."""
    pip_env = {**{name: value for name, value in pip_source_env(sources, flavor).items()
                  if not (cache_mounts and name == PIP_NO_CACHE_DIR)}, **NO_PIP_PYCS}
    return BuildComponent("venv", values={"pip_env": pip_env, "venv": image_contract.VENV_DIR},
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
    root = COMPILED_ROOT.format(name="horovod")
    return BuildComponent(
        "horovod", values={"version": flavor.version("horovod"), "build_env": horovod_build_env(flavor),
                           "toolchain_file": f"/tmp/build/{HOROVOD_TOOLCHAIN_FILE}",
                           "root": root, "extensions_dir": f"{root}{flavor.site_packages}/horovod",
                           "kernel_check_command": cuda.kernel_check_command if cuda else None},
        patches=tuple(component_patches(flavor, "horovod")), written_files={HOROVOD_TOOLCHAIN_FILE: NO_DEBUG_INFO_FLAGS},
        distributions=("horovod",), stage="horovod")


# Horovod's setup.py configures CMake's RelWithDebInfo (its CMakeLists makes that -O3 -g), and the stage strips the
# debug info right after. CMake (3.21 on) reads CMAKE_TOOLCHAIN_FILE from the environment; this one gives that build
# type its flags without -g, which the cache keeps: the same stripped extensions (GCC's -g changes no generated
# code; checked byte for byte), in about a quarter less compile time (209 s -> 161 s on 2 cores). Builds outside
# docker (horovod_source) leave it out and compile as upstream does.
HOROVOD_TOOLCHAIN_FILE = "horovod-no-debug-info.cmake"
NO_DEBUG_INFO_FLAGS = "".join(
    f'set(CMAKE_{language}_FLAGS_RELWITHDEBINFO "-O2 -DNDEBUG" CACHE STRING "RelWithDebInfo without -g")\n'
    for language in ("C", "CXX", "CUDA"))


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
    root = COMPILED_ROOT.format(name="deepspeed")
    return BuildComponent(
        "deepspeed", values={"version": build.version, "source_dir": build.source_dir,
                             "env": {**build.env, **NO_BUILD_ID}, "check_command": build.check_command,
                             "parallel_config": build.parallel_config, "root": root,
                             "ops_dir": f"{root}{flavor.site_packages}/deepspeed",
                             "build_dir": deepspeed_build.BUILD_DIR, "constraints": deepspeed_build.CONSTRAINTS},
        patches=tuple(component_patches(flavor, "deepspeed")),
        files=(f"scripts/{deepspeed_build.CHECK_SCRIPT}",), distributions=("deepspeed",), stage="deepspeed")


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
