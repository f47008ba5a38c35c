"""Horovod's own test suites (tests/upstream, tag v0.28.1) inside the image, 2 ranks, MPI and Gloo,
Keras 3 and Keras 2: what fails must be what tests/upstream/expected_failures.yaml names, with its reason.

Runs only under `invoke test --upstream` (TRAINSTACK_UPSTREAM=1): about 25 minutes on 2 cores.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

UPSTREAM = Path(__file__).parents[1] / "upstream"
SUITES = UPSTREAM / "horovod-0.28.1"
RESULTS = UPSTREAM / "results.json"
# pytest and what Horovod's suites import besides the image's packages, mounted from this venv.
TEST_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "pygments", "parameterized", "mock", "py")

pytestmark = pytest.mark.skipif(os.environ.get("TRAINSTACK_UPSTREAM") != "1",
                                reason="Horovod's own suites run with `invoke test --upstream` (about 25 minutes)")


@dataclass(frozen=True)
class SuiteRun:
    suite: str
    controller: str  # "mpi" or "gloo"
    keras: str  # "3" (tf.keras default) or "2" (TF_USE_LEGACY_KERAS=1)

    @property
    def name(self) -> str:
        return f"{self.suite} {self.controller} keras{self.keras}"


RUNS = [SuiteRun("test_torch.py", controller, "3") for controller in ("mpi", "gloo")] + [
    SuiteRun(suite, controller, keras)
    for suite in ("test_tensorflow.py", "test_tensorflow2_keras.py")
    for controller in ("mpi", "gloo") for keras in ("3", "2")]


def expected_failures(run: SuiteRun) -> dict[str, str]:
    """test id -> reason, for the entries of this suite that apply to this run."""
    entries = yaml.safe_load((UPSTREAM / "expected_failures.yaml").read_text()) or {}
    expected = {}
    for test, entry in (entries.get(run.suite) or {}).items():
        if run.controller in entry.get("controllers", ["mpi", "gloo"]) and run.keras in entry.get("keras", ["3", "2"]):
            expected[test] = entry["reason"]
    return expected


def copy_test_packages(target: Path) -> Path:
    for name in TEST_PACKAGES:
        spec = importlib.util.find_spec(name)
        assert spec is not None, f"{name} is not installed here: pip install -e '.[test]'"
        if spec.submodule_search_locations:
            shutil.copytree(list(spec.submodule_search_locations)[0], target / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(spec.origin, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # the image's user reads them
    return target


def outcomes(junit: Path) -> dict[str, str]:
    """test id (Class::test) -> passed, failed or skipped, from one rank's JUnit XML."""
    results = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        test = f"{case.get('classname').rsplit('.', 1)[-1]}::{case.get('name')}"
        kinds = {child.tag for child in case}
        results[test] = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
    return results


@pytest.fixture(scope="module")
def packages_dir(tmp_path_factory) -> Path:
    return copy_test_packages(tmp_path_factory.mktemp("test-packages"))


@pytest.fixture(scope="module")
def recorded_results():
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    yield results
    RESULTS.write_text(json.dumps(dict(sorted(results.items())), indent=2) + "\n")


@pytest.mark.parametrize("run", RUNS, ids=[run.name.replace(" ", "-") for run in RUNS])
def test_upstream_suite(in_image, packages_dir, recorded_results, tmp_path, run: SuiteRun) -> None:
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)  # the image's user writes the ranks' reports
    launcher = ["trainrun", "mpi", *(["--gloo"] if run.controller == "gloo" else []), "-np", "2", "--no-tag-output"]
    pytest_line = (f"python -m pytest -p no:cacheprovider -q /upstream/parallel/{run.suite} "
                   "--junitxml=/out/rank-$RANK.xml -o junit_family=xunit1")
    status, output = in_image.run_status(
        [*launcher, "sh", "-c", pytest_line], timeout=1800,
        env={"PYTHONPATH": "/test-packages", "TF_USE_LEGACY_KERAS": "1" if run.keras == "2" else "0",
             "HOROVOD_LOG_LEVEL": "error"},
        volumes={str(SUITES): {"bind": "/upstream", "mode": "ro"},
                 str(packages_dir): {"bind": "/test-packages", "mode": "ro"},
                 str(out): {"bind": "/out", "mode": "rw"}})
    junit = out / "rank-0.xml"
    assert junit.exists(), f"exit {status}, no report from rank 0:\n{output[-4000:]}"
    results = outcomes(junit)
    failed = {test for test, outcome in results.items() if outcome == "failed"}
    counts = {outcome: sum(1 for o in results.values() if o == outcome) for outcome in ("passed", "failed", "skipped")}
    expected = expected_failures(run)
    recorded_results[run.name] = {**counts, "failed_tests": sorted(failed)}
    unexpected = sorted(failed - set(expected))
    now_passing = sorted(test for test in expected if results.get(test) == "passed")
    assert not unexpected, f"{run.name}: failures not in expected_failures.yaml: {unexpected}\n{output[-3000:]}"
    assert not now_passing, f"{run.name}: these pass now; remove them from expected_failures.yaml: {now_passing}"
