"""The site's notebook pages (docs/notebooks/) are the example notebooks as a run in the image executed them: the
same cells as examples/notebooks/ and a first cell naming that run. A changed notebook fails here until the image
tier runs it again and `invoke docs --executed-notebooks tests/image/results/notebooks` takes its outputs."""
import json
from pathlib import Path

import pytest

from trainstack.docsite.notebooks import RUN_KEY, cells, drift, page, run_cell

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "examples" / "notebooks").glob("*.ipynb"))
PAGES = REPO / "docs" / "notebooks"


@pytest.mark.parametrize("example", EXAMPLES, ids=[example.stem for example in EXAMPLES])
def test_page_has_the_examples_cells_and_names_its_run(example):
    problems = drift(example, PAGES / example.name)
    assert not problems, (f"docs/notebooks/{example.name}: " + "; ".join(problems) + ". Run the image tier's "
                          "tests/image/test_notebooks.py, then "
                          "invoke docs --executed-notebooks tests/image/results/notebooks")


def test_every_page_has_outputs_of_its_run():
    for path in PAGES.glob("*.ipynb"):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
        assert code and all(cell.get("execution_count") for cell in code), path
        assert notebook["metadata"][RUN_KEY]["image_id"].startswith("sha256:"), path


def test_a_changed_cell_is_drift(tmp_path):
    example = {"cells": [{"id": "a", "cell_type": "code", "source": "print(1)", "metadata": {}, "outputs": [],
                          "execution_count": None}], "metadata": {}}
    executed = json.loads(json.dumps(example))
    executed["cells"][0].update(outputs=[{"output_type": "stream", "name": "stdout", "text": "1\n"}], execution_count=1)
    executed["metadata"][RUN_KEY] = {"image": "trainstack:cpu", "image_id": "sha256:0", "commit": "c", "date": "d",
                                     "seconds": 1}
    (tmp_path / "x.ipynb").write_text(json.dumps(example))
    (tmp_path / "page.ipynb").write_text(json.dumps(page(executed)))
    assert drift(tmp_path / "x.ipynb", tmp_path / "page.ipynb") == []
    assert cells(page(executed))[0] == ("a", "code", "print(1)")
    assert page(executed)["cells"][0] == run_cell(executed["metadata"][RUN_KEY])
    example["cells"][0]["source"] = "print(2)"
    (tmp_path / "x.ipynb").write_text(json.dumps(example))
    assert drift(tmp_path / "x.ipynb", tmp_path / "page.ipynb") == [f"cell 0 (a) differs from {tmp_path / 'x.ipynb'}"]
