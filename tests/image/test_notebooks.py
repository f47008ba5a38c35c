"""The notebooks of the platforms our users come from (examples/notebooks) run headless in the image's own kernel, as
the image's user; their saved outputs show the model learned on both ranks and rank 0 alone wrote the checkpoint."""
from __future__ import annotations

import pytest
from notebook_checks import NOTEBOOKS, check_trainings, executed_notebook

from trainrun.image_contract import EXAMPLES_DIR
from trainstack.docsite.notebooks import RECORDED_DIR, record_run

pytestmark = pytest.mark.timeout(1200)


def execute(in_image, name: str) -> dict:
    """Runs the image's copy of the notebook in a folder of the image user's own; returns the executed notebook."""
    status, output = in_image.run_status(["python", "/units/run_notebook.py", f"{EXAMPLES_DIR}/notebooks/{name}.ipynb",
                                          f"/tmp/notebooks/{name}", "900"], timeout=1100)
    return executed_notebook(status, output)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_trains_on_both_ranks(in_image, image, name):
    notebook = execute(in_image, name)
    check_trainings(name, notebook)
    # The run, kept for the site's notebook pages: invoke docs --executed-notebooks tests/image/results/notebooks
    record_run(notebook, image, RECORDED_DIR / f"{name}.ipynb")
    print(f"{name}: {notebook['metadata']['trainstack_seconds']} s")
