"""`trainrun selftest` in the image, as its user runs it: the CPU path (0 GPUs; torch.distributed over Gloo,
Horovod over MPI with torch and with TensorFlow, a torch.compile step, Ray Train) passes with every sum exact, and its
bad input is one line, exit 2."""
from __future__ import annotations

import json

import pytest

SIZES = "8B:64KiB"
EXPECTED_SIZES = [8 << k for k in range(14)]  # 8B ... 64KiB
SUITES = {"torch": "gloo", "horovod-torch": "mpi", "horovod-tensorflow": "mpi"}
# The report on stdout alone; the progress lines on stderr come with it only when the selftest fails.
SELFTEST = ("trainrun selftest --json --sizes {sizes} 2>/tmp/selftest.err; code=$?; "
            "[ $code -eq 0 ] || cat /tmp/selftest.err; exit $code")


@pytest.fixture(scope="module")
def selftest_report(in_image) -> dict:
    output = in_image.run(["sh", "-c", SELFTEST.format(sizes=SIZES)], env={"OMP_NUM_THREADS": "1"}, timeout=900)
    return json.loads(output)


def test_selftest_passes_on_cpu_with_every_framework_seeing_no_gpu(selftest_report) -> None:
    assert selftest_report["ok"] and selftest_report["failures"] == [], selftest_report["failures"]
    assert selftest_report["path"] == "cpu"
    [host] = selftest_report["hosts"]
    assert host["gpus"] == {"nvidia-smi": 0, "torch": 0, "tensorflow": 0}
    assert {"torch", "tensorflow", "horovod.torch", "horovod.tensorflow"} <= set(host["frameworks"])


@pytest.mark.parametrize("suite", list(SUITES))
def test_every_allreduce_sweep_runs_on_2_ranks_with_every_sum_exact(selftest_report, suite) -> None:
    [sweep] = [s for s in selftest_report["allreduce"] if s["suite"] == suite]
    assert (sweep["transport"], sweep["ranks"], sweep["skipped"], sweep["error"]) == (SUITES[suite], 2, None, None)
    assert [r["bytes"] for r in sweep["results"]] == EXPECTED_SIZES
    assert all(r["correct"] and r["seconds"] > 0 and r["busbw_gbps"] == r["algbw_gbps"] for r in sweep["results"])


def test_ray_trains_check_runs_2_workers_on_a_cluster_of_trainrun_ray(selftest_report) -> None:
    [ray_train] = [check for check in selftest_report["checks"] if check["name"] == "ray-train"]
    assert ray_train["status"] == "ok" and "TorchTrainer with 2 workers" in ray_train["detail"], ray_train


def test_a_torch_compile_step_equals_eager(selftest_report) -> None:
    [compiled] = selftest_report["compile"]
    assert compiled["ok"] and compiled["device"] == "cpu" and compiled["max_abs_diff"] < 1e-5, compiled


@pytest.mark.parametrize("args,option", [(["--sizes", "1x"], "--sizes"), (["-H", "nowhere"], "-H")])
def test_bad_input_is_one_line_exit_2(in_image, args, option) -> None:
    output = in_image.run(["trainrun", "selftest", *args], expect=2, timeout=120)
    lines = [line for line in output.splitlines() if line.startswith("trainrun:")]
    assert len(lines) == 1 and lines[0].startswith(f"trainrun: {option} = "), output
