"""trainrun.checkpoint: folders complete or absent, the newest found, the oldest removed, a kill during a save never
leaving a checkpoint that loads, and stop signals that wait for the training loop."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainrun import checkpoint


def write_step(directory: Path, step: int, keep: int = checkpoint.DEFAULT_KEEP) -> None:
    with checkpoint.writing(directory, step, keep=keep) as folder:
        (folder / "state.txt").write_text(f"step {step}")


def test_the_newest_complete_checkpoint_is_found_and_the_oldest_removed(tmp_path) -> None:
    assert checkpoint.latest(tmp_path / "none") is None
    for step in (10, 20, 30, 40):
        write_step(tmp_path, step)
    assert [found.step for found in checkpoint.complete(tmp_path)] == [20, 30, 40]
    newest = checkpoint.latest(tmp_path)
    assert newest == checkpoint.Checkpoint(40, tmp_path / "step-40")
    assert (newest.path / "state.txt").read_text() == "step 40"
    assert newest.message() == f"resumed from step 40 ({tmp_path / 'step-40'})"
    assert sorted(os.listdir(tmp_path)) == ["step-20", "step-30", "step-40"]


def test_steps_are_ordered_as_numbers_and_the_same_step_is_replaced(tmp_path) -> None:
    write_step(tmp_path, 9)
    write_step(tmp_path, 100)
    with checkpoint.writing(tmp_path, 100) as folder:
        (folder / "state.txt").write_text("step 100, again")
    assert checkpoint.latest(tmp_path).step == 100
    assert (tmp_path / "step-100" / "state.txt").read_text() == "step 100, again"


def test_a_save_that_raises_leaves_no_checkpoint(tmp_path) -> None:
    write_step(tmp_path, 1)
    with pytest.raises(OSError), checkpoint.writing(tmp_path, 2) as folder:
        (folder / "state.txt").write_text("half")
        raise OSError("disk full")
    assert checkpoint.latest(tmp_path).step == 1 and os.listdir(tmp_path) == ["step-1"]


@pytest.mark.parametrize(("step", "keep", "message"), [
    (-1, 3, r"step = -1: is negative \(valid: an integer >= 0\)"),
    (1, 0, r"keep = 0: keeps no checkpoint \(valid: an integer >= 1\)"),
])
def test_bad_arguments_are_one_line(tmp_path, step, keep, message) -> None:
    with pytest.raises(ValueError, match=message), checkpoint.writing(tmp_path, step, keep=keep):
        pass
    assert not tmp_path.joinpath("step-1").exists()


SAVES_THEN_HANGS_IN_A_SAVE = """
import sys, time
from trainrun import checkpoint
with checkpoint.writing(sys.argv[1], 1) as folder:
    (folder / "state.txt").write_text("step 1")
with checkpoint.writing(sys.argv[1], 2) as folder:
    with open(folder / "state.txt", "w") as half:
        half.write("step 2, cut ")
        half.flush()
        print("writing step 2", flush=True)
        time.sleep(60)
"""


def test_a_checkpoint_cut_off_by_sigkill_is_never_picked(tmp_path) -> None:
    """SIGKILL while step 2 is being written: the next start finds step 1, and its first save clears what the kill
    left."""
    process = subprocess.Popen([sys.executable, "-c", SAVES_THEN_HANGS_IN_A_SAVE, str(tmp_path)],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "writing step 2"
    process.kill()
    process.wait()
    left = sorted(os.listdir(tmp_path))
    assert left[1] == "step-1" and left[0].startswith(".partial-step-2-"), left
    assert checkpoint.latest(tmp_path).step == 1
    write_step(tmp_path, 3)
    assert sorted(os.listdir(tmp_path)) == ["step-1", "step-3"]


def test_a_stop_signal_is_held_for_the_training_loop() -> None:
    for signum in checkpoint.STOP_SIGNALS:
        previous = signal.getsignal(signum)
        try:
            stop = checkpoint.stop_on_signals((signum,))
            assert not stop.requested and not stop.agreed(lambda flag: flag)
            os.kill(os.getpid(), signum)
            time.sleep(0.01)
            assert stop.requested and stop.signal == signum and stop.agreed(lambda flag: flag)
        finally:
            signal.signal(signum, previous)
    assert checkpoint.STOPPED == 143
