"""The commands and cells the quickstarts and guides show are in their Markdown, between markers, as
trainstack/docsite/shown.py makes them from what the tests run: a reader of the sources on GitHub sees them, and a
block that differs from its source (a planted edit here) is named by `invoke docs --check` by file and line."""
import json
import shlex
import shutil
from pathlib import Path

import pytest

from trainstack.docsite import pages, shown
from trainstack.image.workflows import WORKFLOWS

REPO = Path(__file__).resolve().parents[3]
SHOWN_PAGES = shown.pages(REPO)


def test_the_quickstarts_and_the_mlflow_guide_show_their_blocks():
    quickstarts = ("get-the-images", "databricks", "synapse", "torch-distributor", "deepspeed", "jupyter-images",
                   "launchers", "slurm")
    assert {f"docs/quickstarts/{name}.md" for name in quickstarts} <= set(SHOWN_PAGES)
    assert "docs/guides/mlflow.md" in SHOWN_PAGES


@pytest.mark.parametrize("page", SHOWN_PAGES)
def test_each_shown_block_is_what_its_source_gives(page):
    text = (REPO / page).read_text(encoding="utf-8")
    assert shown.fill(text, page) == text


def test_a_workflow_block_is_the_registrys_command_in_the_published_image():
    text = (REPO / "docs/quickstarts/launchers.md").read_text(encoding="utf-8")
    workflow = next(workflow for workflow in WORKFLOWS if workflow.name == "ddp-torchrun")
    block = text.split("<!-- workflow ddp-torchrun:start -->\n")[1].split("<!-- workflow ddp-torchrun:end -->")[0]
    assert block.startswith("```shell-session\n$ docker run --rm --shm-size 1g ghcr.io/trainstack/trainstack:cpu \\\n"
                            f"    {shlex.join(workflow.command)}\n```\n")


def test_a_planted_difference_is_named_by_file_and_line(tmp_path, monkeypatch):
    page = "docs/quickstarts/launchers.md"
    (tmp_path / page).parent.mkdir(parents=True)
    shutil.copy(REPO / page, tmp_path / page)
    monkeypatch.setattr(pages, "GENERATED", ())
    assert pages.stale(tmp_path) == []
    text = (tmp_path / page).read_text(encoding="utf-8")
    planted = text.replace("trainrun torch --nproc-per-node 2 /opt", "trainrun torch --nproc-per-node 4 /opt", 1)
    assert planted != text
    (tmp_path / page).write_text(planted, encoding="utf-8")
    [stale] = pages.stale(tmp_path)
    line = planted.splitlines().index(next(line for line in planted.splitlines() if "--nproc-per-node 4 /opt" in line))
    assert (stale.path, stale.line) == (page, line + 1)
    assert "--nproc-per-node 2" in stale.expected and "--nproc-per-node 4" in stale.found
    assert pages.write(tmp_path) == [page] and (tmp_path / page).read_text(encoding="utf-8") == text


def test_a_marker_that_names_nothing_is_refused():
    with pytest.raises(shown.ShownError, match="workflow = 'no-such': is not in trainstack/image/workflows.py"):
        shown.fill("<!-- workflow no-such:start -->\n<!-- workflow no-such:end -->\n", "page.md")
    with pytest.raises(shown.ShownError, match="has no <!-- lab-command:end -->"):
        shown.fill("<!-- lab-command:start -->\n", "page.md")


def test_a_note_is_said_once_per_page_under_the_first_block_it_concerns():
    text = ("<!-- workflow ddp-torchrun:start -->\n<!-- workflow ddp-torchrun:end -->\n\n"
            "<!-- workflow horovod-torch-mpirun:start -->\n<!-- workflow horovod-torch-mpirun:end -->\n")
    filled = shown.fill(text, "docs/quickstarts/page.md")
    assert filled.count("removes with it") == 1
    assert filled.index("removes with it") < filled.index("horovod-torch-mpirun:start")


def test_a_notebook_cell_links_the_page_of_its_outputs():
    filled = shown.fill("<!-- notebook-cell ml_platform_mpirun mpirun:start -->\n"
                        "<!-- notebook-cell ml_platform_mpirun mpirun:end -->\n", "docs/quickstarts/page.md")
    assert filled.split("\n")[1] == "```ipython3"
    assert "[ml_platform_mpirun](../notebooks/ml_platform_mpirun.ipynb)" in filled


def test_a_slurm_script_is_an_example_the_cluster_runs_or_a_golden_render():
    filled = shown.fill("<!-- slurm-script examples/slurm/ddp.sbatch:start -->\n"
                        "<!-- slurm-script examples/slurm/ddp.sbatch:end -->\n", "docs/quickstarts/page.md")
    assert filled.split("\n")[1:3] == ["```bash", "#!/bin/bash"]
    with pytest.raises(shown.ShownError, match="slurm-script = 'examples/ddp_torch_mnist.py': is not a batch script"):
        shown.slurm_script("examples/ddp_torch_mnist.py")


def test_example_code_is_the_part_of_a_workflows_script_its_selectors_pick():
    source = (REPO / "examples/ddp_torch_mnist.py").read_text(encoding="utf-8")
    marker = "example-code examples/ddp_torch_mnist.py pyobject=main"
    filled = shown.fill(f"<!-- {marker}:start -->\n<!-- {marker}:end -->\n", "docs/quickstarts/page.md")
    assert filled.split("\n")[1:3] == ["```python3", "def main():"]
    assert shown.example_code("examples/ddp_torch_mnist.py", ["pyobject=main"]) in source
    # Quoted selectors: from the line holding one text to the line before another, dedented.
    marker = "example-code examples/mlflow_lightning_autolog.py start-at='if trainer.global_rank == 0:' end-before=ranks"
    filled = shown.fill(f"<!-- {marker}:start -->\n<!-- {marker}:end -->\n", "docs/guides/page.md")
    assert filled.split("\n")[1:3] == ["```python3", "if trainer.global_rank == 0:"]
    assert shown.markers(filled)[0][2] == ["examples/mlflow_lightning_autolog.py", "start-at=if trainer.global_rank == 0:",
                                           "end-before=ranks"]
    assert shown.example_code("examples/mlflow_transformers_autolog.py",
                              ["start-at=mlflow.set_tracking_uri", "end-at=mlflow.transformers.autolog()"]) == (
        "mlflow.set_tracking_uri(args.tracking_uri)\nmlflow.transformers.autolog()\n")


def test_example_code_names_what_it_cannot_show():
    with pytest.raises(shown.ShownError, match="'examples/digit_net.py': is not an example script a workflow runs"):
        shown.example_code("examples/digit_net.py", [])
    with pytest.raises(shown.ShownError, match="pyobject='nosuch': no function or class of that name"):
        shown.example_code("examples/ddp_torch_mnist.py", ["pyobject=nosuch"])
    with pytest.raises(shown.ShownError, match="start-at='no such line': no line holds it"):
        shown.example_code("examples/ddp_torch_mnist.py", ["start-at=no such line"])
    with pytest.raises(shown.ShownError, match="'lines=1-3' is not one selector of pyobject=..."):
        shown.example_code("examples/ddp_torch_mnist.py", ["lines=1-3"])
    with pytest.raises(shown.ShownError, match="No closing quotation"):
        shown.markers("<!-- example-code examples/ddp_torch_mnist.py start-at='def:start -->")


def test_every_example_batch_script_is_submitted_by_a_line_of_the_slurm_quickstart():
    """The Slurm tests run the quickstart's `sbatch slurm/SCRIPT.sbatch` lines as pasted (tests/support/slurm_pages.py),
    so each script is submitted where the page shows a line for it."""
    from slurm_pages import batch_lines

    examples = sorted(path.stem for path in (REPO / "examples/slurm").glob("*.sbatch"))
    assert examples and sorted({line.script for line in batch_lines()}) == examples


def test_the_cells_a_page_shows_are_read_as_the_page_shows_them():
    text = shown.fill("<!-- notebook-cell ml_platform_mpirun mpirun:start -->\n"
                      "<!-- notebook-cell ml_platform_mpirun mpirun:end -->\n", "docs/quickstarts/page.md")
    assert shown.shown_cells(text) == [("mpirun", shown.notebook_cell("ml_platform_mpirun", "mpirun").rstrip("\n"))]
    with pytest.raises(shown.ShownError, match="shows no ipython3 block"):
        shown.shown_cells("<!-- notebook-cell ml_platform_mpirun mpirun:start -->\n"
                          "<!-- notebook-cell ml_platform_mpirun mpirun:end -->\n")


@pytest.mark.parametrize("page", SHOWN_PAGES)
def test_a_page_shows_the_cells_of_one_notebook_in_its_order(page):
    """Pasted in page order, the cells run in the order the notebook runs them (tests/image/test_shown_cells.py runs
    them so)."""
    text = (REPO / page).read_text(encoding="utf-8")
    notebooks = {args[0] for _, kind, args in shown.markers(text) if kind == "notebook-cell"}
    assert len(notebooks) <= 1, notebooks
    if notebooks:
        order = [cell["id"] for cell in json.loads(
            (shown.NOTEBOOKS_DIR / f"{notebooks.pop()}.ipynb").read_text(encoding="utf-8"))["cells"]]
        ids = [cell_id for cell_id, _ in shown.shown_cells(text)]
        assert ids == sorted(ids, key=order.index)


def test_a_pages_commands_are_read_as_a_reader_pastes_them():
    text = ("```shell-session\n$ docker run --rm IMAGE \\\n    trainrun doctor\nready\n$ echo $?\n0\n```\n\n"
            "```bash\n# a comment\ninvoke build \\\n  --gpu\n\ninvoke test\n```\n\n```python\nprint(1)\n```\n")
    assert shown.page_commands(text) == ["docker run --rm IMAGE \\\n    trainrun doctor", "echo $?",
                                         "invoke build \\\n  --gpu", "invoke test"]
    assert shown.prompt_commands("$ echo hi\nhi\n") == [("echo hi", "hi\n")]
