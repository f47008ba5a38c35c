"""A job stopped mid-training resumes where it was: the DDP example as users run it, checkpointing through
trainrun.checkpoint, with a rank SIGKILLed mid-epoch under `trainrun torch --max-restarts` (torchrun's elastic agent
restarts the group) and `trainrun spark --max-restarts` (the barrier stage runs again), stopped by SIGTERM as a time
limit or preemption stops it, and run again once it finished."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from fault_harness import MARK, trainrun_argv, trainrun_env, wait_for_files
from launch_helpers import leftover_processes, requires

pytestmark = [pytest.mark.timeout(600), requires(torch=True)]

EXAMPLES = Path(__file__).parents[2] / "examples"
RESUMED = re.compile(r"resumed from step (\d+) \((.+)\)")
# 47 batches an epoch on each of 2 ranks: a checkpoint every 10 steps falls mid-epoch.
TRAINING = ["ddp_torch_mnist.py", "--epochs", "3", "--checkpoint-every", "10"]


def summary(output: str) -> dict:
    line = next(line for line in reversed(output.splitlines()) if '{"workflow"' in line)
    return json.loads(line[line.index("{"):])


TORCHRUN = ("torch", "--nproc-per-node", "2")
# Two executors of one core: a rank on each. A rank runs in its executor's folder: the script by its full path.
SPARK = ("spark", "--master", "local-cluster[2,1,1024]", "--num-processes", "2")


def training(checkpoints: Path, *trainrun_options: str, env: dict[str, str],
             launcher: tuple[str, ...] = TORCHRUN) -> subprocess.Popen:
    script, *arguments = TRAINING
    return subprocess.Popen(trainrun_argv(*launcher, *trainrun_options, str(EXAMPLES / script), *arguments,
                                          "--checkpoint-dir", str(checkpoints)),
                            cwd=EXAMPLES, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def training_process(mark: str, rank: str) -> psutil.Process | None:
    """Rank `rank`'s training process: the program the rank's entry (trainrun.rank, its supervisor) forked, which
    is what a fault or the OOM killer ends."""
    found = {}
    for process in psutil.process_iter(["cmdline", "ppid"]):
        try:
            environ = process.environ()
            if environ.get(MARK) == mark and environ.get("RANK") == rank and \
                    "ddp_torch_mnist.py" in " ".join(process.info["cmdline"] or []):
                found[process.pid] = process
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return next((process for process in found.values() if process.info["ppid"] in found), None)


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("unbroken")
    job = training(folder / "checkpoints", env=trainrun_env(folder))
    out, _ = job.communicate(timeout=300)
    assert job.returncode == 0, out
    return summary(out)


# How each launcher restarts, and the line it prints when it does (torchrun's agent prints none of its own).
RESTARTS = {
    # torchrun's elastic agent restarts both ranks.
    "torchrun": (TORCHRUN, ["--max-restarts", "2"], None),
    # The barrier stage runs again: Spark itself never retries a failed barrier result stage.
    "spark": (SPARK, ["--max-restarts", "1"], "trainrun: rank 1 was killed by SIGKILL; the Spark stage starts again "
                                               "once every rank has a task slot (restart 1 of 1)"),
}


@pytest.mark.parametrize("how", sorted(RESTARTS))
def test_a_rank_killed_mid_epoch_restarts_the_ranks_from_the_checkpoint(tmp_path, unbroken, how) -> None:
    """Rank 1 SIGKILLed once a checkpoint is written: the launcher starts the ranks again, they resume from the
    newest checkpoint, not step 0, and end with the unbroken run's accuracy."""
    launcher, options, restart_line = RESTARTS[how]
    env = trainrun_env(tmp_path)
    checkpoints = tmp_path / "checkpoints"
    started = time.monotonic()
    job = training(checkpoints, *options, env=env, launcher=launcher)
    wait_for_files(checkpoints, "step-*", 1, 180)
    victim = training_process(env[MARK], "1")
    assert victim is not None
    victim.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    out, _ = job.communicate(timeout=300)
    assert job.returncode == 0, out
    assert restart_line is None or restart_line in out.splitlines(), out
    resumed = RESUMED.search(out)
    assert resumed and int(resumed[1]) >= 10, out
    got = summary(out)
    assert got["ranks"] == 2 and abs(got["accuracy"] - unbroken["accuracy"]) <= 0.02, (got, unbroken)
    assert len(got["losses"]) == 3 and got["losses"][-1] < got["losses"][0]
    print(f"killed {killed - started:.1f} s after the start, resumed from step {resumed[1]}, "
          f"done {time.monotonic() - killed:.1f} s after the kill")
    assert leftover_processes(env[MARK]) == []


def test_without_restarts_the_killed_rank_ends_the_job_in_one_line(tmp_path) -> None:
    env = trainrun_env(tmp_path)
    checkpoints = tmp_path / "checkpoints"
    job = training(checkpoints, env=env)
    wait_for_files(checkpoints, "step-*", 1, 120)
    training_process(env[MARK], "1").send_signal(signal.SIGKILL)
    out, _ = job.communicate(timeout=120)
    assert job.returncode != 0
    assert "trainrun: rank 1 was killed by SIGKILL" in out.splitlines()[-1], out[-2000:]
    assert leftover_processes(env[MARK]) == []


def test_sigterm_saves_at_the_next_checkpoint_step_and_the_next_start_resumes_there(tmp_path, unbroken) -> None:
    """SIGTERM to the whole job, as Slurm's time limit, scancel and a preemption send it: every rank saves at the same
    step and ends; started again, the job resumes from that step and ends as the unbroken run does."""
    env = trainrun_env(tmp_path)
    checkpoints = tmp_path / "checkpoints"
    job = training(checkpoints, env=env)
    wait_for_files(checkpoints, "step-*", 1, 120)
    os.kill(job.pid, signal.SIGTERM)
    stopped, _ = job.communicate(timeout=120)
    assert job.returncode != 0, stopped
    saved = max(int(path.name.removeprefix("step-")) for path in checkpoints.glob("step-*"))
    again = training(checkpoints, env=env)
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out
    assert RESUMED.search(out)[1] == str(saved), out
    assert abs(summary(out)["accuracy"] - unbroken["accuracy"]) <= 0.02


def test_a_finished_run_started_again_resumes_at_its_end_with_the_same_summary(tmp_path, unbroken) -> None:
    env = trainrun_env(tmp_path)
    checkpoints = tmp_path / "checkpoints"
    first = training(checkpoints, env=env)
    first_out, _ = first.communicate(timeout=300)
    again = training(checkpoints, env=env)
    out, _ = again.communicate(timeout=300)
    assert first.returncode == again.returncode == 0, first_out + out
    assert RESUMED.search(out) and summary(out) == summary(first_out)
