"""`trainrun ray` on this host, with real Ray processes: a driver runs against the cluster it starts and ends its job
with its own exit code; a node killed under the driver, and --timeout, end the job in one line within a minute; no
process of the job's cluster is left, and the token is in no line the job printed."""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import time

import pytest
from fault_harness import MARK, trainrun_argv, trainrun_env
from launch_helpers import leftover_processes, run_trainrun

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                                          reason="needs Ray (requirements/host-test.txt)")]

DRIVER = """
import os, sys, time
import ray
ray.init()
print("nodes", len(ray.nodes()), "token mode", os.environ.get("RAY_AUTH_MODE"), flush=True)
print("squares", ray.get([ray.remote(lambda x: x * x).remote(i) for i in range(4)]), flush=True)
if sys.argv[1:] == ["fail"]:
    raise SystemExit(3)
if sys.argv[1:] == ["wait"]:
    open(os.path.join(os.environ["REPORT_DIR"], "waiting"), "w").close()
    time.sleep(600)
"""


def nothing_left(mark: str, seconds: float = 15) -> list[str]:
    deadline = time.monotonic() + seconds
    while leftover_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.5)
    return leftover_processes(mark)


@pytest.fixture
def driver(tmp_path):
    path = tmp_path / "driver.py"
    path.write_text(DRIVER)
    return path


def test_the_driver_runs_on_the_cluster_with_a_token_and_its_exit_code_ends_the_job(driver, tmp_path) -> None:
    launch = run_trainrun(["ray", "--num-cpus", "2", "python", str(driver), "fail"], trainrun_env(tmp_path))
    assert launch.returncode == 3, launch.stderr[-3000:]
    assert "nodes 1 token mode token" in launch.stdout and "squares [0, 1, 4, 9]" in launch.stdout, launch.stdout
    assert "trainrun: Ray cluster " in launch.stderr and "1 node up" in launch.stderr, launch.stderr
    assert "RAY_AUTH_TOKEN=" not in launch.stdout + launch.stderr
    assert nothing_left(launch.mark) == []


def test_a_node_killed_under_the_driver_ends_the_job_in_one_line(driver, tmp_path) -> None:
    env = trainrun_env(tmp_path)
    job = subprocess.Popen(trainrun_argv("ray", "python", str(driver), "wait"), env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "waiting").exists():
            assert time.monotonic() < deadline and job.poll() is None, job.communicate()
            time.sleep(0.5)
        (raylet,) = [int(line.split()[0]) for line in leftover_processes(env[MARK]) if "/raylet " in line]
        os.kill(raylet, signal.SIGKILL)
        killed = time.monotonic()
        _, stderr = job.communicate(timeout=90)
    finally:
        job.kill()
    assert job.returncode == 1 and time.monotonic() - killed < 60, stderr[-3000:]
    assert "trainrun: a node of the Ray cluster ended while the driver ran" in stderr, stderr[-3000:]
    assert nothing_left(env[MARK]) == []


@pytest.mark.long  # the runner's --timeout, which CI checks for every other backend (test_failures.py)
def test_timeout_stops_the_driver_and_the_cluster(driver, tmp_path) -> None:
    launch = run_trainrun(["ray", "--timeout", "40", "python", str(driver), "wait"], trainrun_env(tmp_path))
    assert launch.returncode == 124 and launch.seconds < 90, launch.stderr[-3000:]
    assert nothing_left(launch.mark) == []
