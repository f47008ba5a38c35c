"""The container runtime lines of the slurm target and of trainrun's --container-runtime (trainrun.containers) use
only the options each runtime documents, in the forms it reads. Pyxis and Apptainer cannot be installed on the
project's machines, so their lines are checked here (and their whole scripts and plans by the golden files); the
Slurm quickstart's Podman and Charliecloud lines run for real in tests/image/test_slurm_pages.py."""
import shlex

import pytest

from trainrun.containers import container_route

from pooltemplates import load_template, render
from pooltemplates.targets.slurm import enroot_uri

# `srun --help` with Pyxis loaded (github.com/NVIDIA/pyxis/wiki/Usage).
PYXIS_OPTIONS = {"--container-image", "--container-mounts", "--container-workdir", "--container-name",
                 "--container-save", "--container-mount-home", "--no-container-mount-home", "--container-remap-root",
                 "--no-container-remap-root", "--container-entrypoint", "--no-container-entrypoint",
                 "--container-writable", "--container-readonly", "--container-env"}
# `apptainer exec --help` (apptainer.org/docs/user/latest/cli/apptainer_exec.html), those a task needs.
APPTAINER_EXEC_OPTIONS = {"--nv", "--bind", "--env", "--cleanenv", "--pwd", "--containall", "--writable-tmpfs"}
SRUN_OPTIONS = {"--kill-on-bad-exit", "--mpi", "--ntasks-per-node"}


def step_words(runtime: str, template: str = "synapse-gpu-minimal") -> list[str]:
    script = render(load_template(template), "slurm", runtime=runtime, registry="ghcr.io/trainstack", launch="srun")
    line = next(line for line in script.splitlines() if line.startswith("srun "))
    return shlex.split(line.removesuffix(" &"))


def options(words: list[str]) -> set[str]:
    return {word.split("=", 1)[0] for word in words if word.startswith("--")}


def test_pyxis_line_uses_documented_options_and_an_enroot_uri():
    words = step_words("pyxis")
    program = words.index("python")
    assert options(words[:program]) <= PYXIS_OPTIONS | SRUN_OPTIONS
    image = next(word for word in words if word.startswith("--container-image="))
    assert image.split("=", 1)[1].startswith("ghcr.io#trainstack/trainstack:gpu-")


def test_apptainer_line_uses_documented_exec_options():
    words = step_words("apptainer")
    inner = shlex.split(words[words.index("-c") + 1])
    assert inner[:3] == ["exec", "apptainer", "exec"]
    image = next(word for word in inner if word.startswith("docker://"))
    assert options(inner[3:inner.index(image)]) <= APPTAINER_EXEC_OPTIONS
    assert image.startswith("docker://ghcr.io/trainstack/trainstack:gpu-")


def test_podman_line_gives_a_gpu_pool_its_gpus_and_a_cpu_pool_none():
    words = step_words("podman")
    inner = shlex.split(words[words.index("-c") + 1])
    assert inner[inner.index("--device") + 1] == "nvidia.com/gpu=all"
    assert "CUDA_VISIBLE_DEVICES" in inner
    cpu_pool = load_template("local-pool", {"gpu.per_executor": "0"})
    assert "nvidia.com/gpu" not in render(cpu_pool, "slurm", runtime="podman", launch="srun")


@pytest.mark.parametrize(("reference", "uri"), [
    ("ghcr.io/trainstack/trainstack:cpu", "ghcr.io#trainstack/trainstack:cpu"),
    ("localhost:5000/trainstack:cpu", "localhost:5000#trainstack:cpu"),
    ("localhost/trainstack:cpu", "localhost#trainstack:cpu"),
    ("trainstack/trainstack:cpu", "trainstack/trainstack:cpu"),
    ("trainstack:cpu", "trainstack:cpu"),
])
def test_enroot_uri_names_the_registry_with_a_hash(reference, uri):
    assert enroot_uri(reference) == uri


def route(runtime: str, image: str, pmix: bool = True):
    return container_route(runtime, image, workdir="/home/alice/mnist", folders=("/home/alice/.cache/trainrun",),
                           env=("MASTER_ADDR",), pmix=pmix, as_root=False, gpus=True)


def test_trainruns_pyxis_options_are_documented_ones():
    words = route("pyxis", "ghcr.io/trainstack/trainstack:cpu").srun_options()
    assert options(words) <= PYXIS_OPTIONS
    assert "--container-image=ghcr.io#trainstack/trainstack:cpu" in words


@pytest.mark.parametrize("image", ["ghcr.io/trainstack/trainstack:cpu", "/shared/trainstack-cpu.sif"])
def test_trainruns_apptainer_line_uses_documented_exec_options(image):
    inner = shlex.split(route("apptainer", image).prefix()[2])
    assert inner[:3] == ["exec", "apptainer", "exec"]
    shown = image if image.endswith(".sif") else f"docker://{image}"
    assert options(inner[3:inner.index(shown)]) <= APPTAINER_EXEC_OPTIONS
