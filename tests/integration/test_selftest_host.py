"""`trainrun selftest` on this host for real: the CPU path (torch.distributed over Gloo on 2 ranks, under
torchrun, and under mpirun as -H starts it; Horovod where installed) with every sum checked, a torch.compile
step, and a selftest stopped halfway by SIGINT or SIGTERM leaving nothing behind."""
from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from fault_harness import MARK, tagged_processes, trainrun_argv, trainrun_env
from launch_helpers import requires, run_trainrun

pytestmark = [pytest.mark.timeout(600), requires(torch=True)]

SIZES = ["--sizes", "8B:4KiB"]
EXPECTED_SIZES = [8 << k for k in range(10)]  # 8B, 16B, ... 4KiB


def _torch_sweep(report: dict) -> dict:
    [sweep] = [s for s in report["allreduce"] if s["suite"] == "torch"]
    return sweep


def _assert_exact_gloo_sweep(report: dict) -> None:
    sweep = _torch_sweep(report)
    assert (sweep["transport"], sweep["ranks"], sweep["error"]) == ("gloo", 2, None)
    assert [r["bytes"] for r in sweep["results"]] == EXPECTED_SIZES
    for result in sweep["results"]:
        assert result["correct"] and result["wrong_ranks"] == [] and result["missing_ranks"] == []
        assert result["seconds"] > 0
        assert result["algbw_gbps"] == pytest.approx(result["bytes"] / result["seconds"] / 1e9, abs=1e-4)
        assert result["busbw_gbps"] == result["algbw_gbps"]  # 2(n-1)/n = 1 for 2 ranks


def test_the_cpu_path_runs_gloo_on_2_ranks_and_a_compiled_step_with_every_result_checked(tmp_path) -> None:
    """Ray Train's check is left out: the image's selftest test runs it."""
    env = trainrun_env(tmp_path)
    launch = run_trainrun(["selftest", "--json", "--skip", "ray-train", *SIZES], env, timeout=500)
    report = json.loads(launch.stdout)
    assert launch.returncode == 0 and report["ok"], (report["failures"], launch.stderr[-3000:])
    assert report["path"] == "cpu" and report["sizes"] == EXPECTED_SIZES
    [host] = report["hosts"]
    assert host["gpus"]["nvidia-smi"] == 0 and host["gpus"]["torch"] == 0
    _assert_exact_gloo_sweep(report)
    [compiled] = report["compile"]
    assert compiled["ok"] and compiled["device"] == "cpu" and compiled["max_abs_diff"] < 1e-5
    for sweep in report["allreduce"]:
        if sweep["suite"] != "torch":  # Horovod: run where installed, else skipped and said so
            assert sweep["skipped"] or all(r["correct"] for r in sweep["results"]), sweep
    assert tagged_processes(MARK, env[MARK]) == []


@requires(mpirun=True)
def test_with_hosts_the_ranks_start_under_mpirun_as_trainrun_mpi_starts_them(tmp_path) -> None:
    env = trainrun_env(tmp_path)
    launch = run_trainrun(["selftest", "--json", "-H", "localhost:2", *SIZES], env, timeout=500)
    report = json.loads(launch.stdout)
    assert launch.returncode == 0 and report["ok"], (report["failures"], launch.stderr[-3000:])
    assert "2 ranks of mpi (openmpi)" in launch.stderr or "2 ranks of mpi (mpich)" in launch.stderr
    _assert_exact_gloo_sweep(report)


def test_the_table_shows_each_size_with_nccl_tests_columns(tmp_path) -> None:
    launch = run_trainrun(["selftest", "--sizes", "8B,1KiB", "--skip", "ray-train"], trainrun_env(tmp_path),
                          timeout=500)
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert "skip  ray-train" in launch.stdout and "Ray Train on a cluster" not in launch.stderr
    assert "allreduce through torch.distributed (gloo), 2 ranks" in launch.stdout
    assert "size    time (us)  algbw (GB/s)  busbw (GB/s)  result" in launch.stdout
    assert launch.stdout.rstrip().endswith("selftest passed")


@pytest.mark.parametrize("sig,phase", [(signal.SIGTERM, "probe"), (signal.SIGINT, "allreduce")])
def test_a_selftest_stopped_halfway_exits_128_plus_the_signal_and_leaves_no_process(tmp_path, sig, phase) -> None:
    env = trainrun_env(tmp_path)
    proc = subprocess.Popen(trainrun_argv("selftest", "--sizes", "8B:64MiB"), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not any("trainrun.selftest.worker" in line and phase in line
                      for line in tagged_processes(MARK, env[MARK])):
            assert proc.poll() is None and time.monotonic() < deadline, f"no {phase} rank started"
            time.sleep(0.2)
        time.sleep(1)
        signalled_at = time.monotonic()
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, stderr[-3000:]
    assert f"trainrun: selftest stopped: received {signal.Signals(sig).name}" in stderr
    assert stdout == ""  # no report of a selftest that did not finish
    assert time.monotonic() - signalled_at < 30
    assert tagged_processes(MARK, env[MARK]) == []
