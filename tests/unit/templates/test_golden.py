"""Every packaged template rendered for every target, compared with a reviewed golden file.

Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/unit/templates`,
then review the diff of tests/unit/templates/golden/ before committing it.
"""
from pathlib import Path

import pytest

from pooltemplates import TARGETS, load_template, packaged_templates, render

GOLDEN = Path(__file__).parent / "golden"
SUFFIX = {
    "spark-submit": "args",
    "spark-defaults": "conf",
    "synapse": "configure",
    "databricks": "json",
    "kubernetes": "args",
}
CASES = [(name, target) for name in packaged_templates() for target in TARGETS]


def golden_name(name: str, target: str) -> str:
    return f"{name}.{target}.{SUFFIX[target]}"


@pytest.mark.parametrize(("name", "target"), CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_render_matches_golden(name: str, target: str, golden) -> None:
    golden(golden_name(name, target), render(load_template(name), target))


def test_every_golden_file_belongs_to_a_template_and_target() -> None:
    expected = {golden_name(name, target) for name, target in CASES}
    assert {path.name for path in GOLDEN.iterdir()} == expected


def test_every_target_has_a_golden_suffix() -> None:
    assert set(SUFFIX) == set(TARGETS)
