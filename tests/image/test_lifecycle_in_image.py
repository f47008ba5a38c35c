"""The lifecycle faults of tests/integration/test_lifecycle.py under horovodrun's Gloo backend (`trainrun mpi
--gloo`), run inside the image, whose Horovod the host lacks: benchmarks/faults.py in a container with the
repository mounted read-only. Every scenario must end with the expected exit code within 30 s of the fault and
leave no process or directory of the job."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from fault_harness import FAULTS

pytestmark = [pytest.mark.image, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]


def test_gloo_faults_end_in_time_and_leave_nothing(in_image, tmp_path) -> None:
    tmp_path.chmod(0o777)  # the image's user writes the report
    status, output = in_image.run_status(
        ["python", "/src/benchmarks/faults.py", "--backends", "gloo", "--label", "image test",
         "--out", "/out/faults.json"],
        timeout=1100, volumes={str(ROOT): {"bind": "/src", "mode": "ro"}, str(tmp_path): {"bind": "/out", "mode": "rw"}})
    print(output)
    report = json.loads((tmp_path / "faults.json").read_text())
    assert sorted(report["results"]) == sorted(f"{scenario}/gloo" for scenario in FAULTS), output[-4000:]
    missed = {key: row for key, row in report["results"].items() if not row["met"]}
    assert not missed and status == 0, json.dumps(missed, indent=2)
