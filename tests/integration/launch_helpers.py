"""Helpers for real launches on this host: run trainrun, read what ranks reported, scan for leftovers."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

SCRIPTS = Path(__file__).parents[1] / "support" / "ranks"
CPU_POOL_TEMPLATE = Path(__file__).parent / "data" / "cpu-pool.yaml"
MARK = "TRAINRUN_TEST_MARK"


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


def trainrun_env(report_dir: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "REPORT_DIR": str(report_dir), MARK: uuid.uuid4().hex, "PYTHONUNBUFFERED": "1",
           "OMP_NUM_THREADS": "1", "SPARK_WORKER_DIR": str(report_dir / "spark-work"),
           # Short-lived test JVMs start faster with the client compiler alone and a serial GC.
           "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    env.update(extra)
    return env


def trainrun_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainrun", *args]


def run_trainrun(args: list[str], env: dict[str, str], timeout: float = 240) -> Launch:
    started = time.monotonic()
    proc = subprocess.run(trainrun_argv(*args), env=env, capture_output=True, text=True, timeout=timeout)
    return Launch(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started, env[MARK])


def read_reports(report_dir: Path) -> dict[int, dict]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in report_dir.glob("rank-*.json")}


def leftover_processes(mark: str) -> list[str]:
    """Processes still alive that were started for the launch carrying `mark`."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.pid != os.getpid() and proc.environ().get(MARK) == mark and proc.status() != "zombie":
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def wait_for_files(directory: Path, pattern: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(list(directory.glob(pattern))) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} {pattern} files did not appear in {directory} within {timeout}s")
        time.sleep(0.1)
