"""`trainrun doctor` on this host, with and without an image manifest."""
from __future__ import annotations

import json

import pytest
from fault_harness import trainrun_env
from launch_helpers import run_trainrun

pytestmark = pytest.mark.timeout(120)


def test_doctor_on_plain_host_reports_and_exits_by_blockers(tmp_path) -> None:
    launch = run_trainrun(["doctor", "--json"], trainrun_env(tmp_path, TRAINSTACK_MANIFEST=str(tmp_path / "none")))
    report = json.loads(launch.stdout)
    names = {c["name"] for c in report["checks"]}
    assert {"manifest", "gpu", "/dev/shm", "mpi", "java", "nccl-socket"} <= names
    assert launch.returncode == (0 if report["ok"] else 1)


def test_doctor_fails_when_installed_versions_differ_from_the_manifest(tmp_path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"flavor": "cpu", "python": "3.11.2",
                                    "packages": {"psutil": "0.0.1"}, "libraries": {"cuda": None}}))
    launch = run_trainrun(["doctor"], trainrun_env(tmp_path, TRAINSTACK_MANIFEST=str(manifest)))
    assert launch.returncode == 1
    assert "FAIL  psutil" in launch.stdout and "the image manifest says 0.0.1" in launch.stdout
    assert "problem(s) block training" in launch.stdout
