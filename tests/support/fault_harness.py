"""The lifecycle fault harness: run a misbehaving 2-rank job under `trainrun BACKEND`, do the fault, and measure
when the job ended and what of it is left. Shared by tests/integration/test_lifecycle.py, benchmarks/faults.py
and, inside a built image, tests/image/test_lifecycle_in_image.py; it needs only trainrun and psutil."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from trainrun.proctree import JOB_ID

MARK = "TRAINSTACK_TEST_MARK"

# PyTorch's Gloo backend now and then aborts a rank as the process exits, after the job has done its work: a Gloo
# worker thread lets go of a finished collective's tensors while Python finalizes, takes the GIL to do so, and is
# ended by pthread_exit through noexcept C++ frames (upstream: pytorch/pytorch#117762, #190489; a gdb backtrace
# in the image showed ProcessGroupGloo::runLoop -> PyEval_AcquireThread -> pthread_exit while the main thread was
# in Py_FinalizeEx). The image's site hook, images/site-packages/trainstack_gloo_exit.py, prevents it
# (benchmarks/gloo_exit.py measures it); host Pythons, which lack the hook, can still meet it (about 1 in 60 DDP
# jobs under load, measured earlier). A run that fails with this message runs once more, with a warning in the
# report, which in the image says the hook missed; any other failure fails at once.
GLOO_EXIT_ABORT = "terminate called without an active exception"


def once_more_after_gloo_abort(run: Callable[[], tuple[int, str]], what: str,
                               expect: int = 0) -> tuple[int, str]:
    """Calls `run` for an exit code and output; when the code is not `expect` and the output shows the Gloo
    teardown abort, warns and calls it once more."""
    code, output = run()
    if code != expect and GLOO_EXIT_ABORT in output:
        warnings.warn(f"{what}: a rank aborted in Gloo's teardown at exit; run again")
        code, output = run()
    return code, output


def trainrun_env(report_dir: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "REPORT_DIR": str(report_dir), MARK: uuid.uuid4().hex, "PYTHONUNBUFFERED": "1",
           "OMP_NUM_THREADS": "1", "SPARK_WORKER_DIR": str(report_dir / "spark-work"),
           # Short-lived test JVMs start faster with the client compiler alone and a serial GC.
           "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    env.update(extra)
    return env


def trainrun_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainrun", *args]


def wait_for_files(directory: Path, pattern: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(list(directory.glob(pattern))) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} {pattern} files did not appear in {directory} within {timeout}s")
        time.sleep(0.1)


FAULT_RANK = Path(__file__).parent / "ranks" / "fault_rank.py"
DEEPSPEED_FAULT_RANK = Path(__file__).parent / "ranks" / "deepspeed_fault_rank.py"
FAULT_BACKENDS = {
    "torch": ["torch", "--nproc-per-node", "2", "--", str(FAULT_RANK)],
    # DeepSpeed ZeRO-2 ranks under trainrun torch (torchrun), killed mid-step: only the scenarios of BACKEND_SCENARIOS.
    "deepspeed": ["torch", "--nproc-per-node", "2", "--", str(DEEPSPEED_FAULT_RANK), "--deepspeed",
                  "--deepspeed_config", str(DEEPSPEED_FAULT_RANK.parent / "ds_fault.json")],
    "mpi": ["mpi", "-np", "2", "--", sys.executable, str(FAULT_RANK)],
    "gloo": ["mpi", "--gloo", "-np", "2", "--", sys.executable, str(FAULT_RANK)],
    "spark": ["spark", "--master", "local[2]", "--num-processes", "2", "--", str(FAULT_RANK)],
}
# Seconds from trainrun's start by which both ranks have surely started, per backend (Spark starts a JVM).
RANKS_STARTED_BY = {"torch": 8.0, "mpi": 5.0, "gloo": 8.0, "spark": 40.0, "deepspeed": 40.0}
# Backends whose rank runs only some of the scenarios (the others' FAULT behaviours are fault_rank.py's).
BACKEND_SCENARIOS = {"deepspeed": ("rank-killed-by-sigkill",)}
BARRIER_SECONDS = 5.0


@dataclass(frozen=True)
class Fault:
    """FAULT for fault_rank.py, trainrun options, what the harness does to the running job, the exit code and
    message trainrun should give."""
    fault: str
    options: tuple[str, ...] = ()
    kill: str | None = None  # "rank" (SIGKILL rank 1) or "trainrun" (SIGKILL trainrun) once both ranks run
    exit_code: int = 0
    message: str | None = None


FAULTS = {
    "rank-hangs-after-other-exits-0": Fault(
        "hang", ("--exit-barrier-timeout", str(BARRIER_SECONDS)), exit_code=124,
        message="rank 1 did not exit within --exit-barrier-timeout 5s of rank 0 exiting 0"),
    "rank-leaves-child-holding-stdout-success": Fault("leave-child", exit_code=0),
    "rank-leaves-child-holding-stdout-failure": Fault("leave-child-fail", exit_code=3,
                                                      message="rank 1 exited with code 3"),
    "rank-killed-by-sigkill": Fault("wait", kill="rank", exit_code=137, message="rank 1 was killed by SIGKILL"),
    "trainrun-sigkilled": Fault("wait", kill="trainrun", exit_code=-9),
    "rank-fails-then-timeout": Fault("fail-ignore-term", exit_code=3, message="rank 1 exited with code 3"),
}


@dataclass
class FaultRun:
    backend: str
    scenario: str
    exit_code: int | None  # None: trainrun did not end within the harness's limit
    stderr: str
    fault_at: float | None  # time.time() of the fault: rank 0's exit, the kill, rank 1's failure
    ended_at: float  # when trainrun exited (trainrun-sigkilled: when no process of the job was left)
    left: list[str]  # processes of the job still running when trainrun had exited
    left_dirs: list[str]  # the job's directories still there
    job_id: str
    rank_1_up_in_time: bool = True  # rank-fails-then-timeout: rank 1 was up early enough to fail before --timeout

    @property
    def seconds_after_fault(self) -> float | None:
        return None if self.fault_at is None else round(self.ended_at - self.fault_at, 2)


def tagged_processes(name: str, value: str) -> list[str]:
    """Running processes (zombies excluded) whose environment holds NAME=VALUE."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.pid != os.getpid() and value and proc.environ().get(name) == value and \
                    proc.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _modified(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _read_float(path: Path) -> float | None:
    try:
        return float(path.read_text())
    except (OSError, ValueError):
        return None


def run_fault(backend: str, scenario: str, report_dir: Path, limit: float = 240) -> FaultRun:
    """Run fault_rank.py under `trainrun BACKEND` with the scenario's fault; trainrun's output goes to files, so
    a leftover holding it cannot hold the harness.

    rank-fails-then-timeout needs rank 1 up before it is due to fail, shortly before --timeout. On a machine too
    busy for the ranks to start in RANKS_STARTED_BY seconds (CI runs two test tiers at once) the fault came
    after the timeout and the scenario did not happen; it then runs again, in a new directory, with twice the
    room, up to three times."""
    if scenario != "rank-fails-then-timeout":
        return _run_fault_once(backend, scenario, report_dir, limit)
    room = RANKS_STARTED_BY[backend]
    for attempt in range(3):
        directory = report_dir if attempt == 0 else report_dir / f"again-{attempt}"
        directory.mkdir(exist_ok=True)
        run = _run_fault_once(backend, scenario, directory, limit, timeout=room + 2)
        if run.rank_1_up_in_time:
            return run
        warnings.warn(f"{backend} {scenario}: rank 1 was not up in time to fail before --timeout {room + 2:g}s; "
                      f"run again with --timeout {room * 2 + 2:g}s")
        room *= 2
    return run


def _run_fault_once(backend: str, scenario: str, report_dir: Path, limit: float,
                    timeout: float | None = None) -> FaultRun:
    fault = FAULTS[scenario]
    args = FAULT_BACKENDS[backend]
    env = trainrun_env(report_dir, FAULT=fault.fault)
    options = list(fault.options)
    started = time.time()
    fail_at = None
    if timeout is not None:
        # Rank 1 fails shortly before --timeout fires, while rank 0 (ignoring SIGTERM) keeps the launcher busy.
        options += ["--timeout", f"{timeout:g}"]
        fail_at = started + timeout - 1.5
        env["FAIL_AT"] = repr(fail_at)
    out_path, err_path = report_dir / "trainrun.out", report_dir / "trainrun.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(trainrun_argv(args[0], *options, *args[1:]), env=env, stdout=out, stderr=err)
    fault_at = None
    try:
        if fault.kill:
            wait_for_files(report_dir, "pid-*", 2, timeout=RANKS_STARTED_BY[backend] * 3)
            victim = proc.pid if fault.kill == "trainrun" else int((report_dir / "pid-1").read_text())
            fault_at = time.time()
            os.kill(victim, signal.SIGKILL)
        code = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        code = None
        proc.kill()
        proc.wait()
    ended_at = time.time()
    job_id = (report_dir / "job-id").read_text() if (report_dir / "job-id").exists() else ""
    if fault.kill == "trainrun":
        # trainrun is gone at once; its watchdog takes the job down: the time until nothing of it runs counts.
        deadline = time.monotonic() + 60
        while (tagged_processes(JOB_ID, job_id) or tagged_processes(MARK, env[MARK])) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        ended_at = time.time()
    elif fault.fault == "hang":
        fault_at = _read_float(report_dir / "exited-0")
    elif fault.fault in ("leave-child-fail", "fail-ignore-term"):
        fault_at = _read_float(report_dir / "exited-1")
    elif fault.fault == "leave-child":
        fault_at = max(filter(None, (_read_float(report_dir / f"exited-{r}") for r in (0, 1))), default=None)
    left = sorted(set(tagged_processes(JOB_ID, job_id)) | set(tagged_processes(MARK, env[MARK])))
    dirs = {line for path in report_dir.glob("dirs-*") for line in path.read_text().splitlines() if line}
    # fault_rank.py sleeps at least a second before failing: up by FAIL_AT - 1, it fails by FAIL_AT.
    rank_1_up = _modified(report_dir / "pid-1")
    return FaultRun(backend, scenario, code, err_path.read_text(errors="replace"), fault_at, ended_at, left,
                    sorted(d for d in dirs if os.path.exists(d)), job_id,
                    fail_at is None or (rank_1_up is not None and rank_1_up <= fail_at - 1))
