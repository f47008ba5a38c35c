"""Every packaged template rendered for every target, compared with a reviewed golden file; where a
target refuses a template, the golden file (.refused) holds the error.

Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/unit/templates`,
then review the diff of tests/unit/templates/golden/ before committing it.
"""
import re
from pathlib import Path

import pytest

from pooltemplates import TARGETS, TemplateError, load_template, packaged_templates, render

GOLDEN = Path(__file__).parent / "golden"
REPO = Path(__file__).resolve().parents[3]
EXAMPLE = re.compile(r"\b(\w+\.py)\b")
SUFFIX = {
    "spark-submit": "args",
    "spark-defaults": "conf",
    "synapse": "configure",
    "databricks": "json",
    "kubernetes": "args",
    "spark-application": "yaml",
    "pytorchjob": "yaml",
    "mpijob": "yaml",
    "trainjob-torch": "yaml",
    "trainjob-mpi": "yaml",
    "rayjob": "yaml",
    "raycluster": "yaml",
    "databricks-ray": "py",
    "slurm": "sbatch",
}
CASES = [(name, target) for name in packaged_templates() for target in TARGETS]
# The slurm target's srun launch (MPI or torchrun ranks, no Spark): on the nodes' own Python for every template, and
# under each container runtime with the published image.
RUNTIME_REGISTRY = "ghcr.io/trainstack"
RUNTIME_CASES = [(name, "host") for name in packaged_templates()]
RUNTIME_CASES += [(name, runtime) for name in ("synapse-gpu-minimal",) for runtime in ("pyxis", "apptainer", "podman")]


def rendered(name: str, target: str) -> tuple[str, str]:
    """(golden file name, text): the render, or the error of a refused one."""
    try:
        return f"{name}.{target}.{SUFFIX[target]}", render(load_template(name), target)
    except TemplateError as exc:
        return f"{name}.{target}.refused", f"{exc}\n"


@pytest.mark.parametrize(("name", "target"), CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_render_matches_golden(name: str, target: str, golden) -> None:
    golden(*rendered(name, target))


@pytest.mark.parametrize(("name", "runtime"), RUNTIME_CASES, ids=[f"{n}-{r}" for n, r in RUNTIME_CASES])
def test_slurm_srun_render_matches_golden(name: str, runtime: str, golden) -> None:
    golden(*srun_rendered(name, runtime))


def srun_rendered(name: str, runtime: str) -> tuple[str, str]:
    """(golden file name, text) of the slurm target's srun launch, or the error of a refused one."""
    stem = f"{name}.slurm-srun" + ("" if runtime == "host" else f"-{runtime}")
    try:
        return f"{stem}.sbatch", render(load_template(name), "slurm", runtime=runtime, registry=RUNTIME_REGISTRY,
                                        launch="srun")
    except TemplateError as exc:
        return f"{stem}.refused", f"{exc}\n"


# Renders the docs show with overrides: the Slurm quickstart's pool of local-pool with TorchDistributor as its job,
# on the nodes' own Python and in the image under each container runtime.
TORCH_DISTRIBUTOR = {"job.kind": "torch-distributor", "gpu.per_task": "1"}
OVERRIDE_CASES = {
    "local-pool.slurm-torch-distributor.sbatch": ("local-pool", "slurm", TORCH_DISTRIBUTOR, {}),
    **{f"local-pool.slurm-torch-distributor-{runtime}.sbatch": (
        "local-pool", "slurm", TORCH_DISTRIBUTOR, {"runtime": runtime, "registry": RUNTIME_REGISTRY})
       for runtime in ("pyxis", "apptainer", "podman")},
}


@pytest.mark.parametrize("file_name", sorted(OVERRIDE_CASES))
def test_render_with_overrides_matches_golden(file_name: str, golden) -> None:
    name, target, overrides, parameters = OVERRIDE_CASES[file_name]
    golden(file_name, render(load_template(name, overrides), target, **parameters))


def test_every_golden_file_belongs_to_a_template_and_target() -> None:
    expected = {rendered(name, target)[0] for name, target in CASES}
    expected |= {srun_rendered(name, runtime)[0] for name, runtime in RUNTIME_CASES} | set(OVERRIDE_CASES)
    assert {path.name for path in GOLDEN.iterdir()} == expected


def test_every_target_has_a_golden_suffix() -> None:
    assert set(SUFFIX) == set(TARGETS)



def test_every_rendered_script_that_asks_for_requeue_runs_an_example_that_resumes() -> None:
    """A requeued job starts its program again: a script asking for --requeue runs an example that resumes from its
    checkpoints (trainrun.checkpoint), and one whose example does not is not requeued."""
    scripts = sorted(GOLDEN.glob("*.slurm*.sbatch"))
    assert scripts
    for script in scripts:
        text = script.read_text()
        examples = {name for line in text.splitlines() if not line.startswith("#")
                    for name in EXAMPLE.findall(line)}
        assert len(examples) == 1, (script.name, examples)
        resumes = "checkpoint.latest(" in (REPO / "examples" / examples.pop()).read_text()
        assert ("#SBATCH --requeue" in text) == resumes, script.name
        assert ("trap 'scontrol requeue" in text) == resumes, script.name
