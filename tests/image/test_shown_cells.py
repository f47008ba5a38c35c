"""The notebook cells each quickstart shows, pasted as the page shows them and in page order into a fresh notebook in
the image user's `work/`, run in a fresh kernel of the image: a shown cell that leans on a cell the page hides (a
helper's import, a variable, a file a `%%writefile` cell wrote) fails here."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from notebook_checks import executed_notebook

from trainrun.image_contract import IMAGE_HOME
from trainstack.docsite import shown

pytestmark = pytest.mark.timeout(1500)

REPO = Path(__file__).resolve().parents[2]
PAGES = [page for page in shown.pages(REPO)
         if shown.shown_cells((REPO / page).read_text(encoding="utf-8"))]
# Under `invoke test --long`, to keep a fresh machine's CI under the hour: the pages whose cells train with Spark's
# estimators and distributors (their whole notebooks run under --long too, and their workflows in CI). The Jupyter
# page's cells (mpirun and %%trainrun on two ranks) run in CI.
LONG_PAGES = ("docs/quickstarts/databricks.md", "docs/quickstarts/deepspeed.md", "docs/quickstarts/synapse.md",
              "docs/quickstarts/torch-distributor.md")


@pytest.mark.parametrize("page", [
    pytest.param(page, marks=[pytest.mark.long] if page in LONG_PAGES else []) for page in PAGES])
def test_the_cells_a_page_shows_run_as_pasted_into_a_fresh_notebook(in_image, tmp_path, page):
    cells = shown.shown_cells((REPO / page).read_text(encoding="utf-8"))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source, id=cell_id)
                                               for cell_id, source in cells])
    name = Path(page).stem
    pasted = tmp_path / f"{name}.ipynb"
    nbformat.write(notebook, pasted)
    pasted.chmod(0o644)
    tmp_path.chmod(0o755)
    status, output = in_image.run_status(
        ["python", "/units/run_notebook.py", f"/pasted/{pasted.name}", f"{IMAGE_HOME}/work/{name}", "900"],
        volumes={str(tmp_path): {"bind": "/pasted", "mode": "ro"}}, timeout=1400)
    executed = executed_notebook(status, output)
    assert [cell["id"] for cell in executed["cells"]] == [cell_id for cell_id, _ in cells]
    print(f"{page}: {len(cells)} cells in {executed['metadata']['trainstack_seconds']} s")
