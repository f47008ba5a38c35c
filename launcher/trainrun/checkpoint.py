"""Checkpoints a training job resumes from, whatever stopped it: a time limit, preemption, a lost node, a killed rank.

A checkpoint is a folder `DIR/step-N` of the files one rank writes (torch.save's, a framework's own). It is written
under a temporary name, each file and the folder fsynced, then renamed: a folder named `step-N` is complete, and one a
kill cut off keeps its temporary name, which `latest` never picks. The newest `keep` are kept.

    from trainrun import checkpoint

    stop = checkpoint.stop_on_signals()          # SIGTERM, SIGUSR1: finish the step, save, end
    resumed = checkpoint.latest(args.checkpoint_dir)
    if resumed:
        state = torch.load(resumed.path / "state.pt")
        print(resumed.message(), flush=True)     # resumed from step 120 (checkpoints/step-120)
    ...
    if rank == 0:
        with checkpoint.writing(args.checkpoint_dir, step) as folder:
            torch.save(state, folder / "state.pt")
    if stop.agreed(...):  # every rank stops at the same step
        raise SystemExit(checkpoint.STOPPED)

One rank writes (the others would race on the same names); every rank loads.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

PREFIX = "step-"
PARTIAL_PREFIX = ".partial-"
STEP_FOLDER = re.compile(rf"^{PREFIX}(\d+)$")
DEFAULT_KEEP = 3
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
# The exit code of a rank that saved and ended on a stop signal, as a process SIGTERM ended: launchers and Slurm see a
# stopped job, not a finished one.
STOPPED = 128 + signal.SIGTERM


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: the step it was written at and its folder."""

    step: int
    path: Path

    def message(self) -> str:
        """The line a resumed run prints: `resumed from step 120 (checkpoints/step-120)`."""
        return f"resumed from step {self.step} ({self.path})"


def complete(directory: str | os.PathLike) -> list[Checkpoint]:
    """The complete checkpoints in `directory`, oldest first (none where it does not exist)."""
    folder = Path(directory)
    if not folder.is_dir():
        return []
    found = [Checkpoint(int(match[1]), folder / entry.name) for entry in os.scandir(folder)
             if entry.is_dir() and (match := STEP_FOLDER.match(entry.name))]
    return sorted(found, key=lambda checkpoint: checkpoint.step)


def latest(directory: str | os.PathLike) -> Checkpoint | None:
    """The newest complete checkpoint in `directory`, or None to start from the beginning."""
    found = complete(directory)
    return found[-1] if found else None


@contextlib.contextmanager
def writing(directory: str | os.PathLike, step: int, keep: int = DEFAULT_KEEP) -> Iterator[Path]:
    """A folder to write step `step`'s files into; when the block ends without an exception, the files and the folder
    are fsynced and the folder becomes `directory/step-N` (replacing one of the same step), then all but the newest
    `keep` are removed. An exception, or a kill, leaves no `step-N` behind."""
    if step < 0:
        raise ValueError(f"step = {step}: is negative (valid: an integer >= 0)")
    if keep < 1:
        raise ValueError(f"keep = {keep}: keeps no checkpoint (valid: an integer >= 1)")
    parent = Path(directory)
    parent.mkdir(parents=True, exist_ok=True)
    _remove_partials(parent)
    partial = Path(tempfile.mkdtemp(prefix=f"{PARTIAL_PREFIX}{PREFIX}{step}-", dir=parent))
    try:
        yield partial
        _fsync_tree(partial)
        final = parent / f"{PREFIX}{step}"
        if final.exists():  # the same step written again (a resumed run that saved before its next step)
            shutil.rmtree(final)
        os.rename(partial, final)
        _fsync(parent)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    for old in complete(parent)[:-keep]:
        shutil.rmtree(old.path, ignore_errors=True)


def _remove_partials(parent: Path) -> None:
    """What an earlier writer left when a kill cut it off (one rank writes, so none is being written now)."""
    for entry in os.scandir(parent):
        if entry.name.startswith(PARTIAL_PREFIX):
            shutil.rmtree(entry.path, ignore_errors=True)


def _fsync_tree(folder: Path) -> None:
    for root, folders, files in os.walk(folder):
        for name in files:
            _fsync(Path(root) / name)
        for name in folders:
            _fsync(Path(root) / name)
    _fsync(folder)


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class StopRequest:
    """Set by a stop signal (SIGTERM: Slurm at a time limit, scancel or requeue, torchrun's agent, Kubernetes;
    SIGUSR1: Slurm's --signal) instead of ending the process, so that the training loop saves at its next step and
    ends with STOPPED."""

    def __init__(self) -> None:
        self.signal: int | None = None

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def agreed(self, any_rank: Callable[[bool], bool]) -> bool:
        """Whether any rank was asked to stop, by `any_rank` (e.g. an all-reduce of a flag with MAX), so that every
        rank saves and ends at the same step rather than one waiting in a collective for a peer that left."""
        return any_rank(self.requested)

    def _handle(self, signum: int, frame: object) -> None:
        self.signal = signum


def stop_on_signals(signals: tuple[int, ...] = STOP_SIGNALS) -> StopRequest:
    """A StopRequest that `signals` set from now on, in place of their default action."""
    request = StopRequest()
    for signum in signals:
        signal.signal(signum, request._handle)
    return request
