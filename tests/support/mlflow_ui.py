"""What MLflow's UI must show of a run a workflow logged, in Debian's chromium (tests/browser/mlflow_run.js): the
run's page with its name, its parameters and its last loss, and the loss's chart drawing every epoch's loss."""
from __future__ import annotations

from pathlib import Path

import pytest
from chromium import drive_chromium


def check_the_run_in_the_ui(browser_tools: str, container, url: str, result: dict, params: dict[str, str],
                            screenshots: Path, metric: str = "loss") -> None:
    """`result`: the workflow's summary (its run_id and losses); `params`: parameters the run's page must list;
    `container`: where the server runs, whose log a failure shows."""
    page = drive_chromium(browser_tools, container, "mlflow_run.js", url, result["run_id"], metric, str(screenshots))
    run = page["run"]
    assert run["heading"] == run["name"], run
    rows = dict(row for row in map(tuple, run["rows"]) if len(row) == 2)
    assert float(rows[metric]) == pytest.approx(result["losses"][-1]), rows
    assert {name: rows.get(name) for name in params} == params, rows
    chart = page["chart"]
    assert chart["title"] == metric and chart["lines"], chart
    for line in chart["lines"]:
        assert line["x"] == list(range(len(result["losses"]))) and line["y"] == pytest.approx(result["losses"]), chart
