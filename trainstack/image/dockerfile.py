"""A flavor's Dockerfile: images/Dockerfile.j2 rendered with values computed here (apt packages, labels, in-image
paths) and the builder's components (trainstack/image/components.py: each one's steps and their values), so the
templates stay declarative and every string reaching a RUN line is quoted by construction."""
from __future__ import annotations

import json
import shlex

import jinja2

from trainrun import image_contract
from trainstack.image import naming, openmpi_defaults
from trainstack.image.components import BUILDER_STAGE, FRAMEWORKS_STAGE, build_components, builder_stages
from trainstack.image.cuda_build import NVIDIA_LD_CONF
from trainstack.image.matrix import REPO_ROOT, Flavor
from trainstack.image.sources import SourceOptions

IMAGES_DIR = REPO_ROOT / "images"
# openssh-server: workers of multi-node jobs run sshd as the image's user (images/scripts/trainstack-sshd).
RUNTIME_APT_PACKAGES = ["python3", "openmpi-bin", "libopenmpi3", "openssh-client", "openssh-server", "procps", "tini",
                        "ca-certificates"]
# torch.compile's toolchain in every image: Inductor compiles C++ (g++, libgomp) against torch/include and Python.h,
# Triton compiles its C launchers (gcc, libc6-dev's headers and libc_nonshared.a) against Python.h.
COMPILE_TOOLCHAIN_APT_PACKAGES = ["gcc", "g++", "libc6-dev", "libpython3-dev"]
# dpkg path-excludes for that layer, files neither compiler runs for torch.compile: libpython's static archives
# (70 MB; nothing links them), gcc's link-time optimizer (31 MB; Inductor and Triton never pass -flto) and the
# sanitizer runtimes (20 MB; nor -fsanitize).
COMPILE_TOOLCHAIN_EXCLUDES = ["path-exclude /usr/lib/python3*/config-*/libpython3*.a",
                              "path-exclude /usr/lib/*/libpython3*.a",
                              "path-exclude /usr/lib/gcc/*/lto1",
                              "path-exclude /usr/lib/*/lib*san.so*",
                              "path-exclude /usr/lib/gcc/*/lib*san*"]
# A BuildKit build's pip steps keep pip's cache (downloads, wheels built from sdists) here between builds; it is in no
# layer. The classic builder has no cache mounts: its builder stage sets PIP_NO_CACHE_DIR instead.
PIP_CACHE_MOUNT = "--mount=type=cache,id=trainstack-pip,target=/root/.cache/pip "
# A BuildKit build makes the builder stages with BuildKit, tagged BUILDER_IMAGE, then the image's own stages (runtime-os
# and the image) from IMAGE_STAGES_DOCKERFILE with the classic builder: BuildKit 0.8 (docker 20.10's) stamps the folders
# a context COPY writes, and those its RUN steps' mount points sit in, with the time of the build, so the image's layers
# would differ in every build; the venv's layers, made by venv_layers.py, come out the same from either.
BUILDER_IMAGE = "trainstack-builder:{flavor}"
# The stage BuildKit builds and tags BUILDER_IMAGE: the builder's venv layers and their report, alone in one layer
# (exporting every layer of the builder stages took 46 s of a cold cpu build).
BUILDER_OUTPUT_STAGE = "builder-output"
IMAGE_STAGES_DOCKERFILE = "Dockerfile.image"
# The stage of the image's system layers (its compile toolchain, its user): it needs runtime-os alone, so a BuildKit build
# makes it with the classic builder while BuildKit builds the builder stages.
IMAGE_OS_STAGE = "image-os"
BUILDER_APT_PACKAGES = ["g++", "make", "cmake", "patch", "binutils", "python3-dev", "python3-venv", "libopenmpi-dev"]
# The mtime of every file, link and folder in the image's own layers (2000-01-01T00:00:00Z: any constant does; zip
# files can hold it), so that no layer records when it was built and two builds of the same inputs give the same one.
LAYER_MTIME = 946684800
# Ends each RUN step of the image's stages: what the step changed gets LAYER_MTIME, and the logs and caches that
# record when it ran go (images/scripts/reproducible_layer.py, which the first step copies in).
REPRODUCIBLE_LAYER_SCRIPT = f"{image_contract.IMAGE_SCRIPTS_DIR}/reproducible_layer.py"
STEP_START = 'layer_start="$(date +%s%N)"'
STEP_END = f'python3 {REPRODUCIBLE_LAYER_SCRIPT} "$layer_start" {LAYER_MTIME}'
# Folders of the build context that the image copies into / as they are, each path in one its path in the image, so
# that every folder a COPY writes carries LAYER_MTIME (a folder made by COPY itself would carry the time of the build).
RUNTIME_OS_ROOT = "runtime-os-root"
IMAGE_ROOT = "image-root"
# Where the builder splits the venv into its layers (images/scripts/venv_layers.py), and the folder holding that
# split's report at its path in the image.
VENV_LAYERS_BUILD_DIR = "/tmp/build/venv-layers"
VENV_LAYERS_BUILD_REPORT_ROOT = "/tmp/build/venv-layers-report"
# The build record (build_context.build_record): what the builder applied, which write_manifest.py adds to the
# manifest.
BUILD_RECORD_PATH = "/etc/trainstack/build-record.json"
# The module that makes `import NAME` of a package the flavor lists as `absent` say why (images/site-packages/), its
# data and the .pth file that loads it at startup, all copied into the venv's site-packages.
ABSENT_PACKAGES_MODULE = "trainstack_absent_packages"
ABSENT_PACKAGES_PTH = "trainstack-absent-packages.pth"
# The site hooks in every image, each a module and the .pth that imports it at startup: torch.compile says, as it
# starts, that its caches are on a noexec mount; a rank told to by its launcher writes whole lines; a rank that used
# Gloo lets its workers finish before Python finalizes, so it does not die of SIGABRT at exit; a Lightning Trainer,
# TrainingArguments or Accelerator whose process count disagrees with the ranks started says so in one line; an MLflow
# tracking URI that cannot be reached is one line naming it; a task srun started gets the uniform rank environment.
# A .pth of the examples folder (image_contract.EXAMPLES_DIR): the examples' helpers (digit_net, synthetic_digits, ...)
# import from any folder, as the quickstarts' cells and a script written with %%writefile do; the folder comes last on
# sys.path, so a module of the user's own name wins.
EXAMPLES_PTH = "trainstack-examples.pth"
SITE_HOOK_FILES = ("trainstack_compile_cache.py", "trainstack-compile-cache.pth",
                   "trainstack_line_buffered.py", "trainstack-line-buffered.pth",
                   "trainstack_gloo_exit.py", "trainstack-gloo-exit.pth",
                   "trainstack_framework_ranks.py", "trainstack-framework-ranks.pth",
                   "trainstack_mlflow_tracking.py", "trainstack-mlflow-tracking.pth",
                   "trainstack_slurm_ranks.py", "trainstack-slurm-ranks.pth")


def labels(flavor: Flavor) -> dict[str, str]:
    components = {f"{naming.LABEL_PREFIX}.{name}.version": str(spec["version"])
                  for name, spec in flavor.components.items()}
    return {
        "org.opencontainers.image.title": f"trainstack {flavor.name}",
        "org.opencontainers.image.description": flavor.description,
        "org.opencontainers.image.source": naming.PROJECT_URL,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.base.name": flavor.base_image,
        naming.FLAVOR_LABEL: flavor.name,
        **components,
    }


def render_dockerfile(flavor: Flavor, sources: SourceOptions = SourceOptions(), buildkit: bool = False,
                      builder_image: str | None = None) -> str:
    """The flavor's Dockerfile; `buildkit`: for BuildKit, whose pip steps keep pip's cache in a cache mount (the same
    layers either way). `builder_image`: the builder stages left out, the image's stages copying from that image
    (IMAGE_STAGES_DOCKERFILE)."""
    java_package = flavor.field("java", "apt_package")
    components = build_components(flavor, sources, cache_mounts=buildkit)
    stages = {stage.name: stage for stage in builder_stages(components)}
    context = {
        "flavor": flavor.name,
        "base_image": flavor.base_image,
        "runtime_apt_packages": [*RUNTIME_APT_PACKAGES, java_package],
        "builder_apt_packages": BUILDER_APT_PACKAGES,
        "compile_toolchain_apt_packages": COMPILE_TOOLCHAIN_APT_PACKAGES,
        "compile_toolchain_excludes": COMPILE_TOOLCHAIN_EXCLUDES,
        "notebook_dir": image_contract.NOTEBOOK_DIR,
        "ca_bundle": sources.ca_bundle is not None,
        "frameworks_stage": stages.pop(FRAMEWORKS_STAGE),
        "builder_stage": stages.pop(BUILDER_STAGE),
        "compile_stages": list(stages.values()),
        "pip_cache_mount": PIP_CACHE_MOUNT if buildkit else "",
        "buildkit": buildkit,
        "compiled_distributions": [name for component in components if component.compiled
                                   for name in component.distributions],
        "builder_output_stage": BUILDER_OUTPUT_STAGE,
        "builder_image": builder_image,
        "image_os_stage": IMAGE_OS_STAGE,
        "headers_left_in_builder": [path for component in components for path in component.left_in_builder],
        "site_packages_cleanup": [line for component in components for line in component.site_packages_cleanup],
        "nvidia_ld_conf": NVIDIA_LD_CONF if flavor.gpu else None,
        "site_packages": flavor.site_packages,
        "venv_layers": flavor.venv_layers,
        "venv_layers_dir": VENV_LAYERS_BUILD_DIR,
        "venv_layers_report_root": VENV_LAYERS_BUILD_REPORT_ROOT,
        "venv_layers_path": image_contract.VENV_LAYERS_PATH,
        "layer_mtime": LAYER_MTIME,
        "step_start": STEP_START,
        "step_end": STEP_END,
        "runtime_os_root": RUNTIME_OS_ROOT,
        "image_root": IMAGE_ROOT,
        "prune_globs": flavor.prune_globs,
        "runtime_env": runtime_env(),
        "openmpi_mca_lines": openmpi_defaults.mca_lines(),
        "openmpi_mca_file": openmpi_defaults.MCA_FILE,
        "openmpi_coll_rules_lines": openmpi_defaults.coll_rules_lines(),
        "openmpi_coll_rules_file": openmpi_defaults.COLL_RULES_FILE,
        "venv": image_contract.VENV_DIR,
        "local_package_dirs": image_contract.LOCAL_PACKAGE_DIRS,
        "image_scripts_dir": image_contract.IMAGE_SCRIPTS_DIR,
        "sshd_command": image_contract.SSHD_COMMAND,
        "build_record_path": BUILD_RECORD_PATH,
        "manifest_path": image_contract.MANIFEST_PATH,
        "sbom_path": image_contract.SBOM_PATH,
        "constraints_path": image_contract.CONSTRAINTS_PATH,
        "spark_writable_dirs": [image_contract.SPARK_WORKER_DIR, image_contract.SPARK_LOG_DIR],
        # local-cluster's workers (started inside the driver's JVM) ignore SPARK_WORKER_DIR: SPARK_HOME/work.
        "spark_home_work_dir": f"{flavor.site_packages}/pyspark/work",
        "labels": labels(flavor),
        "user": image_contract.IMAGE_USER,
        "uid": image_contract.IMAGE_USER_UID,
    }
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(IMAGES_DIR),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    # Words from the matrix in RUN lines go through `shell`; its patterns already refuse metacharacters.
    environment.filters["shell"] = shlex.quote
    return environment.get_template("Dockerfile.j2").render(context)


def runtime_env() -> dict[str, str]:
    return {
        "PATH": f"{image_contract.VENV_DIR}/bin:$PATH",
        "PYSPARK_PYTHON": f"{image_contract.VENV_DIR}/bin/python",
        "PYSPARK_DRIVER_PYTHON": f"{image_contract.VENV_DIR}/bin/python",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "SPARK_WORKER_DIR": image_contract.SPARK_WORKER_DIR,
        "SPARK_LOG_DIR": image_contract.SPARK_LOG_DIR,
        # Triton's kernel cache, by default under the home directory, which may be read-only or missing
        # (Inductor's own cache is already /tmp/torchinductor_USER).
        "TRITON_CACHE_DIR": image_contract.TRITON_CACHE_DIR,
        # Where torch's cpp_extension (DeepSpeed's JIT ops) builds, by default under the home directory too.
        "TORCH_EXTENSIONS_DIR": image_contract.TORCH_EXTENSIONS_DIR,
        # MLflow imports GitPython, which warns on every import that the image has no git executable.
        "GIT_PYTHON_REFRESH": "quiet",
        # Ray on Spark's start hook: token authentication between driver, head and worker nodes, a token per cluster
        # (read by setup_ray_cluster, in the flavors that hold Ray).
        "RAY_ON_SPARK_START_HOOK": image_contract.RAY_ON_SPARK_START_HOOK,
    }


def login_profile() -> str:
    """/etc/profile.d/trainstack.sh: the image's environment again for login shells (bash -l, su -, ssh), which
    start from /etc/profile's PATH and nothing of docker's ENV."""
    env = {**runtime_env(), "PIP_CONSTRAINT": image_contract.CONSTRAINTS_PATH}
    lines = ["# Written by trainstack: the image's environment for login shells."]
    for name, value in env.items():
        # $PATH stays outside the quotes, so the shell expands it.
        lines.append(f"export {name}=" + '"$PATH"'.join(shlex.quote(part) if part else "" for part in value.split("$PATH")))
    return "\n".join(lines) + "\n"


def absent_packages_data(flavor: Flavor) -> str:
    """trainstack_absent_packages.json: the flavor's `absent` list, which the module answers imports from."""
    return json.dumps({"flavor": flavor.name, "absent": [dict(entry) for entry in flavor.absent]}, indent=2) + "\n"


def lab_settings_overrides() -> str:
    """JupyterLab's settings overrides for the image: never fetch Jupyter's news or check for updates, so a
    new user is not asked on first start and the server makes no requests to the internet, as docker-stacks
    images turn the announcements off. A user's own settings still win."""
    return json.dumps({"@jupyterlab/apputils-extension:notification": {"fetchNews": "false",
                                                                        "checkForUpdates": False}}, indent=2) + "\n"


def ipython_config() -> str:
    """The venv's IPython config (every kernel and shell of the image): trainrun's notebook extension loaded."""
    return ("# Written by trainstack: %%trainrun, %%configure and a predefined `spark` in every kernel.\n"
            f"c.InteractiveShellApp.extensions = [{image_contract.IPYTHON_EXTENSION!r}]\n")
