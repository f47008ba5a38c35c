"""Helpers for real launches on this host: run trainrun, read what ranks reported, scan for leftovers (the
lifecycle fault harness they share with benchmarks/faults.py is tests/support/fault_harness.py)."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from fault_harness import MARK, tagged_processes, trainrun_argv

SCRIPTS = Path(__file__).parents[1] / "support" / "ranks"
CPU_POOL_TEMPLATE = Path(__file__).parent / "data" / "cpu-pool.yaml"


def requires(*, mpirun: bool = False, torch: bool = False, spark: bool = False) -> pytest.MarkDecorator:
    missing = []
    if mpirun and shutil.which("mpirun") is None:
        missing.append("mpirun")
    if mpirun and importlib.util.find_spec("mpi4py") is None and importlib.util.find_spec("horovod") is None:
        missing.append("mpi4py or horovod")
    if torch and importlib.util.find_spec("torch") is None:
        missing.append("torch")
    if spark and (importlib.util.find_spec("pyspark") is None or shutil.which("java") is None):
        missing.append("pyspark and java")
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}")


def has_pooltemplates() -> bool:
    return importlib.util.find_spec("pooltemplates") is not None


def mpi_collective() -> str:
    return "horovod" if importlib.util.find_spec("horovod") else "mpi4py"


@dataclass
class Launch:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    mark: str


def run_trainrun(args: list[str], env: dict[str, str], timeout: float = 240) -> Launch:
    started = time.monotonic()
    proc = subprocess.run(trainrun_argv(*args), env=env, capture_output=True, text=True, timeout=timeout)
    return Launch(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started, env[MARK])


def read_reports(report_dir: Path) -> dict[int, dict]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in report_dir.glob("rank-*.json")}


def leftover_processes(mark: str) -> list[str]:
    """Processes still alive that were started for the launch carrying `mark`."""
    return tagged_processes(MARK, mark)
