"""Failure semantics on real processes: a failing rank, SIGTERM, --timeout, missing backends, bad input."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
from fault_harness import trainrun_argv, trainrun_env, wait_for_files
from launch_helpers import SCRIPTS, leftover_processes, requires, run_trainrun

pytestmark = pytest.mark.timeout(300)

FAIL = str(SCRIPTS / "fail_rank.py")
JOBS = {
    "mpi": (["mpi", "-np", "2", "--", sys.executable, FAIL], requires(mpirun=True)),
    "torch": (["torch", "--nproc-per-node", "2", "--", FAIL], requires(torch=True)),
    "spark": (["spark", "--master", "local[2]", "--num-processes", "2", "--", FAIL], requires(torch=True, spark=True)),
}


def job_params(*names: str, sig: signal.Signals | None = None) -> list:
    return [pytest.param(JOBS[name][0], *([sig] if sig else []), marks=JOBS[name][1],
                         id=f"{name}-{sig.name}" if sig else name) for name in names]


def assert_nothing_left(mark: str, pids: list[int]) -> None:
    deadline = time.monotonic() + 5
    while leftover_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftover_processes(mark) == []
    assert [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"] == []


@pytest.mark.parametrize("job", job_params("mpi", "torch", "spark"))
def test_rank_exit_code_stops_job_within_30s_and_names_rank(job, tmp_path) -> None:
    env = trainrun_env(tmp_path, FAIL_RANK="1", FAIL_CODE="3")
    launch = run_trainrun(job, env, timeout=240)
    ended = time.time()
    assert launch.returncode == 3, launch.stderr[-3000:]
    assert "trainrun: rank 1 exited with code 3" in launch.stderr
    assert ended - float((tmp_path / "failed-at").read_text()) < 30
    pids = [int((tmp_path / f"pid-{r}").read_text()) for r in (0, 1)]
    assert_nothing_left(launch.mark, pids)


@pytest.mark.parametrize("job,sig", [*job_params("mpi", "torch", sig=signal.SIGTERM),
                                     *job_params("mpi", sig=signal.SIGINT)])
def test_signal_to_trainrun_ends_every_rank(job, sig, tmp_path) -> None:
    env = trainrun_env(tmp_path, FAIL_RANK="-1")
    proc = subprocess.Popen(trainrun_argv(*job), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for_files(tmp_path, "pid-*", 2, timeout=120)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, stderr[-3000:]
    assert f"trainrun: received {sig.name}; job stopped" in stderr
    assert_nothing_left(env["TRAINSTACK_TEST_MARK"], [int(p.read_text()) for p in tmp_path.glob("pid-*")])


@requires(mpirun=True)
def test_timeout_stops_the_job(tmp_path) -> None:
    env = trainrun_env(tmp_path, FAIL_RANK="-1")
    launch = run_trainrun(["mpi", "--timeout", "4", "-np", "2", "--", sys.executable, FAIL], env, timeout=60)
    assert launch.returncode == 124, launch.stderr[-3000:]
    assert "job exceeded --timeout 4s" in launch.stderr
    assert launch.seconds < 30
    assert_nothing_left(launch.mark, [int(p.read_text()) for p in tmp_path.glob("pid-*")])


@requires(mpirun=True)
def test_command_that_cannot_run_exits_127_naming_a_rank(tmp_path) -> None:
    program = tmp_path / "no-such-interpreter"  # there, but its interpreter is not: each rank's sh cannot run it
    program.write_text("#!/no/such/interpreter\n")
    program.chmod(0o755)
    launch = run_trainrun(["mpi", "-np", "2", "--", str(program)], trainrun_env(tmp_path), timeout=60)
    assert launch.returncode == 127, launch.stderr[-3000:]
    assert f"trainrun-rank: 1: {program}: not found" in launch.stderr
    assert re.search(r"trainrun: rank [01] exited with code 127; job stopped", launch.stderr), launch.stderr[-3000:]


def test_missing_mpirun_is_one_line_saying_what_to_install(tmp_path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(sys.executable, bin_dir / "python")
    launch = run_trainrun(["mpi", "-np", "2", "--", "python", FAIL], trainrun_env(tmp_path, PATH=str(bin_dir)))
    assert launch.returncode == 127
    assert launch.stderr == ("trainrun: mpirun is not available: install Open MPI (apt-get install openmpi-bin) "
                             "or MPICH so that mpirun is on PATH\n")


def test_bad_input_is_one_line_and_starts_nothing(tmp_path) -> None:
    launch = run_trainrun(["mpi", "-np", "3", "-H", "localhost:2", "--", "python", FAIL], trainrun_env(tmp_path))
    assert launch.returncode == 2
    assert launch.stderr == "trainrun: -np = 3: is invalid (valid: at most 2, the slots in -H localhost:2)\n"
    assert not list(tmp_path.glob("pid-*"))
