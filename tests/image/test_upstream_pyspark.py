"""PySpark's own distributor suites inside the image: TorchDistributor, its data loader, its log streaming, the
DeepSpeed distributor and their Spark Connect parity suites, from the Spark release the image's pyspark is.

They are not copied into this repository: the pyspark wheel ships the release's Python sources, tests included, in
pyspark/python/lib/pyspark.zip. tests/image/units/pyspark_suites.py extracts them there, as the image's user, and runs
them against the installed, patched pyspark. What fails, or a suite that collects nothing, must be what
tests/upstream/pyspark-expected-failures.yaml names, with its reason; counts go to tests/upstream/results.json.

Two runs:
- `spark-ci`, the suites as Spark's CI runs them, is part of the image tier (about 2 minutes on 2 cores);
- `with-slow-classes` also runs the classes Spark's CI skips as "Disabled due to slowness" (SPARK-50864): the
  TorchDistributor end-to-end runs on local[4] and local-cluster, with fake GPUs. It runs only under
  `invoke test --upstream` (TRAINSTACK_UPSTREAM=1), with Horovod's suites.
"""
from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import yaml
# The pytest packages mounted into the container and results.json's record, shared with Horovod's suites.
from test_upstream_horovod import packages_dir, recorded_results  # noqa: F401 (fixtures)

UPSTREAM = Path(__file__).parents[1] / "upstream"
EXPECTED = UPSTREAM / "pyspark-expected-failures.yaml"
# The modules pyspark_suites.py runs (pyspark/ml/... in pyspark.zip), by the name junit gives their classes.
SUITES = {
    "test_distributor.py": "pyspark.ml.torch.tests.test_distributor",
    "test_data_loader.py": "pyspark.ml.torch.tests.test_data_loader",
    "test_log_communication.py": "pyspark.ml.torch.tests.test_log_communication",
    "test_deepspeed_distributor.py": "pyspark.ml.deepspeed.tests.test_deepspeed_distributor",
    "test_parity_torch_distributor.py": "pyspark.ml.tests.connect.test_parity_torch_distributor",
    "test_parity_torch_data_loader.py": "pyspark.ml.tests.connect.test_parity_torch_data_loader",
}
RUNS = {"spark-ci": [], "with-slow-classes": ["--slow"]}
TIMEOUT = {"spark-ci": 900, "with-slow-classes": 1800}


def expected(run: str) -> tuple[str, dict[str, dict[str, str]], dict[str, str]]:
    """The pyspark version the list is for; per suite, test id (Class::test) -> reason; suite -> why it collects
    nothing; each for the entries that apply to this run."""
    entries = yaml.safe_load(EXPECTED.read_text())
    failures = {suite: {test: entry["reason"] for test, entry in (tests or {}).items()
                        if run in entry.get("runs", list(RUNS))}
                for suite, tests in (entries.get("failures") or {}).items()}
    empty = {suite: entry["reason"] for suite, entry in (entries.get("not_collected") or {}).items()
             if run in entry.get("runs", list(RUNS))}
    return entries["pyspark"], failures, empty


def outcomes(out: Path) -> dict[str, dict[str, str]]:
    """suite file -> test id (Class::test) -> passed, failed or skipped, from the suites' JUnit reports."""
    modules = {module: suite for suite, module in SUITES.items()}
    results: dict[str, dict[str, str]] = {suite: {} for suite in SUITES}
    for case in (case for junit in sorted(out.glob("*.xml")) for case in ElementTree.parse(junit).iter("testcase")):
        module, test_class = case.get("classname").rsplit(".", 1)
        kinds = {child.tag for child in case}
        outcome = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        results[modules[module]][f"{test_class}::{case.get('name')}"] = outcome
    return results


# Both runs under `invoke test --upstream`, with Horovod's suites: Spark's CI's run took two of CI's 60 minutes.
@pytest.mark.parametrize("run", ["spark-ci", "with-slow-classes"])
@pytest.mark.skipif(os.environ.get("TRAINSTACK_UPSTREAM") != "1",
                    reason="PySpark's own suites run with `invoke test --upstream`")
def test_pyspark_suites(in_image, packages_dir, recorded_results, tmp_path, run: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)  # the image's user writes the report
    status, output = in_image.run_status(
        ["python", "/units/pyspark_suites.py", *RUNS[run], "/out", "-q"], timeout=TIMEOUT[run],
        env={"PYTHONPATH": "/test-packages"},
        volumes={str(packages_dir): {"bind": "/test-packages", "mode": "ro"}, str(out): {"bind": "/out", "mode": "rw"}})
    reports = {junit.stem for junit in out.glob("*.xml")}
    assert reports == {Path(suite).stem for suite in SUITES}, f"exit {status}, reports {reports}:\n{output[-4000:]}"
    version, expected_failures, expected_empty = expected(run)
    image_version = re.search(r"\(pyspark (\S+)\)", output).group(1)
    assert image_version == version, (f"the image's pyspark is {image_version}, {EXPECTED.name} is for {version}: "
                                      "review its entries against this release's suites")
    problems = []
    for suite, results in outcomes(out).items():
        failed = {test for test, outcome in results.items() if outcome == "failed"}
        listed = expected_failures.get(suite, {})
        recorded_results[f"pyspark-{version} {suite} {run}"] = {
            **{outcome: list(results.values()).count(outcome) for outcome in ("passed", "failed", "skipped")},
            "failed_tests": sorted(failed)}
        if unexpected := sorted(failed - set(listed)):
            problems.append(f"{suite}: failures not in {EXPECTED.name}: {unexpected}")
        if now_passing := sorted(test for test in listed if results.get(test) == "passed"):
            problems.append(f"{suite}: these pass now; remove them from {EXPECTED.name}: {now_passing}")
        if not results and suite not in expected_empty:
            problems.append(f"{suite}: collected no test")
        if results and suite in expected_empty:
            problems.append(f"{suite}: runs now; remove it from not_collected in {EXPECTED.name}")
    assert not problems, "\n".join(problems) + f"\n{output[-3000:]}"
