"""The example notebooks as site pages, with the outputs of a real run in the image: the image tier
(tests/image/test_notebooks.py) records each executed notebook with the run that made it, `invoke docs
--executed-notebooks DIR` copies those into docs/notebooks/ with a first cell saying which run it was, and a test
holds their cells to examples/notebooks/ (a changed notebook needs a new run)."""
from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainrun.image_contract import EXAMPLES_DIR

RUN_KEY = "trainstack_run"  # notebook metadata: the run that produced the outputs
REVISION_LABEL = "org.opencontainers.image.revision"
# Where the image tier records its executed notebooks (ignored by git), for `invoke docs --executed-notebooks`.
RECORDED_DIR = Path(__file__).resolve().parents[2] / "tests" / "image" / "results" / "notebooks"
RUN_CELL_ID = "trainstack-run"


def record_run(notebook: dict[str, Any], image: Any, out: Path) -> Path:
    """Writes the executed notebook to `out` with the run that made it in its metadata: the image (a docker SDK
    Image: its content tag, id and the commit it was built from, its OCI revision label, which is where its notebooks
    come from) and the time."""
    recorded = copy.deepcopy(notebook)
    recorded["metadata"][RUN_KEY] = {
        "image": max(image.tags, key=len) if image.tags else image.id, "image_id": image.id,
        "commit": image.labels.get(REVISION_LABEL, "unknown")[:12],
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "seconds": notebook["metadata"].get("trainstack_seconds"),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(recorded, ensure_ascii=False), encoding="utf-8")
    return out


def run_cell(run: dict[str, Any]) -> dict[str, Any]:
    """The page's first cell: which run produced the outputs below."""
    text = ("```{admonition} Outputs of a real run\n"
            f"The outputs below are those of a headless run of this notebook in the image `{run['image']}` "
            f"(`{run['image_id'][:19]}`, built from commit `{run['commit']}`) on {run['date']}, recorded by the "
            f"image tier's `tests/image/test_notebooks.py`, which checked them; the run took {run['seconds']} s. "
            "The notebook is `examples/notebooks/` in the repository and "
            f"`{EXAMPLES_DIR}/notebooks/` in the image.\n```")
    return {"cell_type": "markdown", "id": RUN_CELL_ID, "metadata": {}, "source": text}


def page(executed: dict[str, Any]) -> dict[str, Any]:
    """The site's copy: the executed notebook with the run's cell first."""
    notebook = copy.deepcopy(executed)
    notebook["cells"].insert(0, run_cell(notebook["metadata"][RUN_KEY]))
    notebook["metadata"].pop("trainstack_seconds", None)
    return notebook


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def cells(notebook: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(id, type, source) of each cell but the run's."""
    return [(cell.get("id", ""), cell["cell_type"], _source(cell)) for cell in notebook["cells"]
            if cell.get("id") != RUN_CELL_ID]


def drift(example: Path, page_copy: Path) -> list[str]:
    """How the site's copy differs from the example notebook: cells added, removed or changed, and a run cell
    that does not say what the metadata does."""
    if not page_copy.exists():
        return [f"{page_copy} is missing"]
    source, shown = (json.loads(path.read_text(encoding="utf-8")) for path in (example, page_copy))
    problems = []
    expected, found = cells(source), cells(shown)
    for index, (want, have) in enumerate(zip(expected, found)):
        if want != have:
            problems.append(f"cell {index} ({want[0]}) differs from {example}")
    if len(expected) != len(found):
        problems.append(f"{len(found)} cells, {example} has {len(expected)}")
    run = shown["metadata"].get(RUN_KEY)
    if run is None or _source(shown["cells"][0]) != run_cell(run)["source"]:
        problems.append(f"its first cell does not name the run in its metadata ({RUN_KEY})")
    return problems


def write_pages(executed_dir: Path, examples_dir: Path, pages_dir: Path) -> list[Path]:
    """Every executed notebook recorded in executed_dir whose example still has the same cells, as a page."""
    written = []
    for executed_path in sorted(executed_dir.glob("*.ipynb")):
        executed = json.loads(executed_path.read_text(encoding="utf-8"))
        example = examples_dir / executed_path.name
        if RUN_KEY not in executed["metadata"] or not example.exists():
            continue
        if cells(executed) != cells(json.loads(example.read_text(encoding="utf-8"))):
            raise ValueError(f"{executed_path}: its cells differ from {example}; run the image tier's "
                             "tests/image/test_notebooks.py again")
        target = pages_dir / executed_path.name
        target.write_text(json.dumps(page(executed), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(target)
    return written
