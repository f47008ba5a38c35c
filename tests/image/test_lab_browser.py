"""JupyterLab of the image in a real browser: Debian's chromium, headless, driven by playwright-core
(tests/browser/run_notebook.js; `./dev setup` installs both). Without the token the server shows its login page;
with it, the Synapse seed notebook runs all its cells: its `%%trainrun` cell shows every rank's tagged output in
the page, and its TorchEstimator trains; a rank's line shows in the page while its cell still runs. The screenshot is
left in tests/browser/results/."""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import requests

from chromium import RESULTS_DIR, browser_node, drive_chromium
from notebook_checks import check_trainings

from trainrun.image_contract import IMAGE_USER_UID, NOTEBOOK_DIR
from trainstack.clusters.lab import lab_url

NOTEBOOK = Path(__file__).parents[2] / "examples" / "notebooks" / "synapse_torch_estimator.ipynb"


def copy_into(container, source: Path, directory: str) -> None:
    """Puts `source` into the container's `directory`, owned by the image's user (who saves it from the page)."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tar.gettarinfo(str(source), arcname=source.name)
        info.uid = info.gid = IMAGE_USER_UID
        info.mode = 0o644
        with source.open("rb") as data:
            tar.addfile(info, data)
    assert container.put_archive(directory, archive.getvalue())


@pytest.fixture(scope="module")
def browser_tools() -> str:
    return browser_node()


def open_lab(start_lab) -> tuple[object, str, str]:
    """A started lab container, its base URL and its token."""
    container = start_lab(shm_size="1g")  # Horovod's and Spark's shared memory
    base, token = lab_url(container, timeout=180).split("/lab?token=")
    return container, base, token


# Long (2 minutes): CI shows a rank's line in Chromium while its cell runs (below), and every rank's output reaching
# the cell that ran it headless (test_notebook_output.py).
@pytest.mark.long
def test_notebook_in_chromium_shows_every_ranks_output_in_the_trainrun_cell(browser_tools, start_lab):
    container, base, token = open_lab(start_lab)
    copy_into(container, NOTEBOOK, NOTEBOOK_DIR)
    RESULTS_DIR.mkdir(exist_ok=True)
    screenshot = RESULTS_DIR / "lab-trainrun.png"
    page = drive_chromium(browser_tools, container, "run_notebook.js", base, token, f"work/{NOTEBOOK.name}",
                          "%%trainrun mpi -np 2", r"\[1,1\]<stdout>:rank 1 of 2: allreduce sum 3", str(screenshot))
    print(f"screenshot: {screenshot}")

    # Without the token: the login page, no notebook.
    assert "/login?next=" in page["login"]["url"] and page["login"]["password_field"] >= 1, page["login"]
    output = page["cell"]["output"]
    for rank in (0, 1):
        assert f"[1,{rank}]<stdout>:rank {rank} of 2: allreduce sum 3" in output, output
    assert output.splitlines()[-1].strip() == "3", output  # rank 0's last expression, the cell's Out[]
    # What the browser's run saved: the ranks' check and the TorchEstimator's training, as the headless run shows.
    saved = requests.get(f"{base}/api/contents/work/{NOTEBOOK.name}", headers={"Authorization": f"token {token}"})
    check_trainings("synapse_torch_estimator", saved.json()["content"])
    assert screenshot.stat().st_size > 10_000


@pytest.mark.long  # invoke test --long (40 s): CI's browser runs are the Synapse notebook's and the streaming one
def test_the_home_examples_run_all_in_chromium_without_an_error(browser_tools, start_lab):
    """The example notebook where JupyterLab's file browser shows it, ~/examples/notebooks (the entrypoint's copy of
    the image's examples), opened and run all as it is: its `%%writefile train.py` writes beside it, mpirun and
    %%trainrun train, and no cell fails."""
    container, base, token = open_lab(start_lab)
    name = "ml_platform_mpirun.ipynb"
    RESULTS_DIR.mkdir(exist_ok=True)
    screenshot = RESULTS_DIR / "lab-home-examples.png"
    drive_chromium(browser_tools, container, "run_notebook.js", base, token, f"examples/notebooks/{name}",
                   "%%trainrun mpi -np 2", r"\[1,1\]<stdout>:rank 1 of 2", str(screenshot))
    saved = requests.get(f"{base}/api/contents/examples/notebooks/{name}",
                         headers={"Authorization": f"token {token}"}).json()["content"]
    failed = {cell["id"]: cell["outputs"] for cell in saved["cells"] if cell["cell_type"] == "code"
              and any(output["output_type"] == "error" for output in cell["outputs"])}
    assert failed == {}, failed
    check_trainings("ml_platform_mpirun", saved)
    written = requests.get(f"{base}/api/contents/examples/notebooks/train.py", headers={"Authorization": f"token {token}"})
    assert written.status_code == 200 and "hvd.init()" in written.json()["content"]


STREAMING_CELL = """%%trainrun mpi -np 2
import os, time
print('streamed from rank', os.environ['RANK'])
time.sleep(30)
print('rank', os.environ['RANK'], 'done')"""


def test_a_ranks_line_shows_in_the_page_while_its_cell_still_runs(browser_tools, start_lab, tmp_path):
    import nbformat

    container, base, token = open_lab(start_lab)
    notebook = tmp_path / "streaming.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(STREAMING_CELL)],
                                            metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                     "language": "python"}}), notebook)
    copy_into(container, notebook, NOTEBOOK_DIR)
    page = drive_chromium(browser_tools, container, "stream_cell.js", base, token, f"work/{notebook.name}",
                          "%%trainrun mpi", r"\[1,1\]<stdout>:streamed from rank 1", timeout=600)
    # The line was in the page while the ranks slept, before the cell ended.
    assert page["seen_while_running"], page
    assert "done" not in page["output_when_seen"], page
    assert "[1,0]<stdout>:rank 0 done" in page["output_at_end"], page
