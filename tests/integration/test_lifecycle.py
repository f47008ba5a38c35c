"""The job's lifecycle on real processes, every backend this host has: a rank that hangs after another exited 0,
a rank leaving children that hold its stdout (success and failure), a rank SIGKILLed, trainrun SIGKILLed, a rank
failure followed by --timeout. Each asserts trainrun's exit code and message, the time from the fault to the
job's end, and that no process tagged with the job (TRAINRUN_JOB_ID, and the test's own mark) nor any of its
directories is left. Also: the Spark output channel refuses a connection without the job's token."""
from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time

import psutil
import pytest
from fault_harness import (
    BARRIER_SECONDS,
    FAULTS,
    MARK,
    run_fault,
    tagged_processes,
    trainrun_argv,
    trainrun_env,
    wait_for_files,
)
from launch_helpers import requires

from trainrun.backends.spark.output import EXIT
from trainrun.proctree import job_temp_dirs

pytestmark = pytest.mark.timeout(400)

NEEDS = {"torch": requires(torch=True), "mpi": requires(mpirun=True), "spark": requires(torch=True, spark=True),
         "gloo": pytest.mark.skipif(not shutil.which("horovodrun"), reason="needs horovodrun")}
# Seconds from the fault (for the hang: from the exit barrier's end) to the job's end.
WITHIN = 30.0


# Long (40 s): --timeout after a rank's failure on a Spark barrier stage; CI runs it under torchrun and mpirun, and
# the Spark stage's own endings in the other scenarios.
LONG_CASES = {("spark", "rank-fails-then-timeout")}


def cases() -> list:
    return [pytest.param(backend, scenario, id=f"{backend}-{scenario}",
                         marks=[NEEDS[backend], *([pytest.mark.long] if (backend, scenario) in LONG_CASES else [])])
            for backend in NEEDS for scenario in FAULTS]


@pytest.mark.parametrize("backend,scenario", cases())
def test_fault_ends_the_job_within_30s_naming_what_happened_and_leaves_nothing(backend, scenario, tmp_path) -> None:
    fault = FAULTS[scenario]
    run = run_fault(backend, scenario, tmp_path)
    assert run.exit_code == fault.exit_code, run.stderr[-3000:]
    if fault.message:
        assert f"trainrun: {fault.message}" in run.stderr, run.stderr[-3000:]
    assert run.fault_at is not None, run.stderr[-3000:]
    allowed = WITHIN + (BARRIER_SECONDS if fault.fault == "hang" else 0)
    assert run.seconds_after_fault < allowed, run.stderr[-3000:]
    assert run.job_id and run.left == [], run.left
    assert run.left_dirs == [] and job_temp_dirs(run.job_id) == []


def test_a_rank_failure_before_the_timeout_is_reported_not_the_timeout(tmp_path) -> None:
    """torchrun gives a rank that ignores SIGTERM 30 s, so --timeout fires while the failure is being handled."""
    pytest.importorskip("torch")
    run = run_fault("torch", "rank-fails-then-timeout", tmp_path)
    assert run.exit_code == 3 and "job exceeded --timeout" not in run.stderr, run.stderr[-3000:]


RANK_WAITING_FOR_INJECTION = """import os, time
print("rank", os.environ["RANK"], "up", flush=True)
open(os.path.join(os.environ["REPORT_DIR"], "pid-" + os.environ["RANK"]), "w").write(str(os.getpid()))
deadline = time.time() + 120
while not os.path.exists(os.path.join(os.environ["REPORT_DIR"], "injected")) and time.time() < deadline:
    time.sleep(0.1)
"""


@requires(torch=True, spark=True)
def test_spark_output_channel_refuses_connections_without_the_job_token(tmp_path) -> None:
    script = tmp_path / "waits.py"
    script.write_text(RANK_WAITING_FOR_INJECTION)
    env = trainrun_env(tmp_path)
    proc = subprocess.Popen(trainrun_argv("spark", "--master", "local[2]", "--num-processes", "2", "--", str(script)),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_files(tmp_path, "pid-*", 2, timeout=120)
        drivers = [psutil.Process(int(line.split()[0])) for line in tagged_processes(MARK, env[MARK])
                   if "trainrun.backends.spark.driver" in line]
        assert len(drivers) == 1
        listening = [c.laddr for c in drivers[0].net_connections("tcp") if c.status == psutil.CONN_LISTEN]
        assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening  # all ranks local
        for addr in listening:
            with socket.create_connection((addr.ip, addr.port), timeout=10) as sock:
                try:  # the server closes the connection at the first line, which is not the token
                    sock.sendall(b"[rank 0] INJECTED line\n" + f"{EXIT}0 42 -\n".encode())
                    sock.shutdown(socket.SHUT_WR)
                    sock.recv(64)
                except OSError:
                    pass
        time.sleep(1)
        (tmp_path / "injected").write_text("")
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    # The injected exit record (rank 0, code 42) reached nothing. The driver's other listener, PySpark's
    # accumulator server, refuses the client too, with a traceback naming its port (which may hold the digits 42).
    assert "INJECTED" not in stdout and "code 42" not in stderr, stderr[-3000:]
    assert "[rank 0] rank 0 up" in stdout and "[rank 1] rank 1 up" in stdout


@requires(mpirun=True)
def test_leftovers_of_a_successful_job_with_output_to_devnull_are_ended(tmp_path) -> None:
    """mpi with output to /dev/null left 2 helpers running under init after a success."""
    env = trainrun_env(tmp_path)
    started = time.monotonic()
    out = subprocess.run(trainrun_argv("mpi", "-np", "2", "--", "sh", "-c", "sleep 600 & sleep 600 & exit 0"),
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert time.monotonic() - started < 30
    assert tagged_processes(MARK, env[MARK]) == []


def test_trainrun_exits_without_a_watchdog_left_behind(tmp_path) -> None:
    env = trainrun_env(tmp_path)
    out = subprocess.run(trainrun_argv("mpi", "-np", "1", "--", sys.executable, "-c", "pass"), env=env,
                         capture_output=True, text=True, timeout=120)
    if out.returncode == 127:
        pytest.skip("needs mpirun")
    assert out.returncode == 0, out.stderr[-3000:]
    assert [p for p in tagged_processes(MARK, env[MARK]) if "TRAINRUN_TAKE_DOWN" in p or "trainrun.watchdog" in p] == []
