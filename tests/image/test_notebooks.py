"""The notebooks of the platforms our users come from (examples/notebooks) run headless in the image's own kernel, as
the image's user; their saved outputs show the model learned on both ranks and rank 0 alone wrote the checkpoint, the
loss curves matplotlib plotted, and no cell shows one warning over and over."""
from __future__ import annotations

import pytest
from fault_harness import once_more_after_gloo_abort
from notebook_checks import MAX_PLOT_BYTES, NOTEBOOKS, check_trainings, executed_notebook, plots, repeated_warnings

from trainrun.image_contract import EXAMPLES_DIR, IMAGE_HOME, IMAGE_USER
from trainstack.docsite.notebooks import RECORDED_DIR, record_run

pytestmark = pytest.mark.timeout(1200)


def execute(in_image, name: str) -> dict:
    """Runs the image's copy of the notebook in a folder of the image user's own; returns the executed notebook."""
    command = ["python", "/units/run_notebook.py", f"{EXAMPLES_DIR}/notebooks/{name}.ipynb", f"/tmp/notebooks/{name}",
               "900"]
    status, output = once_more_after_gloo_abort(lambda: in_image.run_status(command, timeout=1100), name)
    return executed_notebook(status, output)


# Under `invoke test --long` (about 3 minutes), to keep a fresh machine's CI under the hour: Horovod's notebook (the
# horovod workflows and HorovodRunner train in CI), the Synapse one (test_lab_browser runs it in Chromium in CI) and
# DeepSpeed's (DeepspeedTorchDistributor trains in CI: test_distributors and two deepspeed-distributor workflows) and
# TorchDistributor's (its function, script and local-mode workflows and test_distributors train in CI).
LONG_NOTEBOOKS = ("databricks_horovod", "synapse_torch_estimator", "databricks_deepspeed", "torch_distributor")


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=[pytest.mark.long] if name in LONG_NOTEBOOKS else []) for name in NOTEBOOKS])
def test_notebook_trains_on_both_ranks(in_image, image, name):
    notebook = execute(in_image, name)
    check_trainings(name, notebook)
    # The loss curves, as images small enough for the site's page.
    shown = plots(notebook)
    assert shown and max(shown.values()) <= MAX_PLOT_BYTES, shown
    # A warning repeated at every step buries the cell's output, and the site's page with it.
    assert not repeated_warnings(notebook), repeated_warnings(notebook)
    # The run, kept for the site's notebook pages: invoke docs --executed-notebooks tests/image/results/notebooks
    record_run(notebook, image, RECORDED_DIR / f"{name}.ipynb")
    print(f"{name}: {notebook['metadata']['trainstack_seconds']} s")


# The image user's own copy of the examples, which the entrypoint makes at the first start: where JupyterLab's file
# browser shows them, and where the README points.
HOME_EXAMPLES = f"{IMAGE_HOME}/examples"


def test_a_notebook_runs_where_the_home_shows_it(in_image):
    """ml_platform_mpirun.ipynb run in ~/examples/notebooks, as JupyterLab runs it when opened there: its
    `%%writefile train.py` writes beside it (it was root's folder, a PermissionError), then mpirun and
    %%trainrun train."""
    folder = f"{HOME_EXAMPLES}/notebooks"
    status, output = in_image.run_status(["python", "/units/run_notebook.py", f"{folder}/ml_platform_mpirun.ipynb",
                                          folder, "900"], timeout=1100)
    check_trainings("ml_platform_mpirun", executed_notebook(status, output))


COPY_CHECKS = f"""
set -eu
test -d ~/examples && test ! -L ~/examples && test -w ~/examples/notebooks
test "$(stat -c %U ~/examples/notebooks/ml_platform_mpirun.ipynb)" = {IMAGE_USER}
diff -r {EXAMPLES_DIR} ~/examples
test "$(stat -c %U {EXAMPLES_DIR})" = root && test ! -w {EXAMPLES_DIR}
echo edited > ~/examples/notebooks/ml_platform_mpirun.ipynb
rm ~/examples/notebooks/torch_distributor.ipynb
/opt/trainstack/bin/trainstack-entrypoint true
test "$(cat ~/examples/notebooks/ml_platform_mpirun.ipynb)" = edited
test ! -e ~/examples/notebooks/torch_distributor.ipynb
rm -rf ~/examples && ln -s {EXAMPLES_DIR} ~/examples
/opt/trainstack/bin/trainstack-entrypoint true
test ! -L ~/examples && diff -r {EXAMPLES_DIR} ~/examples
test -z "$(ls -A ~ | grep '^\\.examples\\.' || true)"
echo copies-checked
"""


def test_the_entrypoint_copies_the_examples_once_and_keeps_the_users_edits(in_image):
    """Copied when absent, never over the user's own (edited or deleted files stay so), a link to the pristine
    folder (older images) replaced, /opt untouched, no staging folder left; a home it cannot write gets none and
    the command still runs."""
    assert "copies-checked" in in_image.run(["bash", "-c", COPY_CHECKS])
    assert in_image.run(["bash", "-c", "test ! -e ~/examples && echo none"], options={"read_only": True}).strip() \
        == "none"
