"""Finding and ending every process of one job, even those reparented away from the launcher.

Processes are found by tags in their environment (/proc/PID/environ, the environment a process started
with), never by name: TRAINRUN_JOB_ID, set for the launcher and inherited by everything it starts, marks the
job; TRAINRUN_RANK_ENTRY, exported by each rank's entry (its pid), marks what one rank started, so that the
entry ends its rank's leftovers (a data-loader worker, a helper holding the rank's stdout) when the rank ends.
Reads /proc directly: a scan of a few hundred processes takes about a millisecond, which a job pays at its end.
"""
from __future__ import annotations

import os
import select
import signal
import sys
import time
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    import subprocess

JOB_ID = "TRAINRUN_JOB_ID"
RANK_ENTRY = "TRAINRUN_RANK_ENTRY"
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
# How long leftovers of a rank get after SIGTERM before SIGKILL.
LEFTOVER_GRACE = 2.0


def prctl(option: int, value: int) -> bool:
    """Linux prctl(2); False where it is not available."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return b"\0" + f.read()
    except OSError:
        return b""


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2:].split()
    return fields[0].decode(), int(fields[1])


def alive(pid: int) -> bool:
    """Running (not a zombie, not gone)."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def pids_tagged(name: str, value: str) -> list[int]:
    """Live processes whose starting environment holds NAME=VALUE, this one excepted."""
    needle = f"\0{name}={value}\0".encode()
    me = os.getpid()
    return [pid for pid in _pids() if pid != me and needle in _environ(pid) + b"\0" and alive(pid)]


def descendants(root: int) -> list[int]:
    """Live descendants of `root`, by parent pid."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        stat = _stat(pid)
        if stat is not None and stat[0] not in ("Z", "X"):
            children.setdefault(stat[1], []).append(pid)
    found, queue = [], list(children.get(root, []))
    while queue:
        pid = queue.pop()
        found.append(pid)
        queue.extend(children.get(pid, []))
    return found


def _reap_children() -> None:
    """Collect exited children of this process (a subreaper inherits orphans and must reap them)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def terminate(pids: Iterable[int], grace: float, find_more=None) -> int:
    """SIGTERM `pids`, SIGKILL what is still running after `grace` seconds (and what `find_more()` finds then);
    returns once none runs or after another `grace`. Returns how many were signalled."""
    pids = list(pids)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap_children()
        if not any(alive(pid) for pid in pids):
            break
        time.sleep(0.05)
    remaining = [pid for pid in pids if alive(pid)] + (list(find_more()) if find_more else [])
    for pid in remaining:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace
    while remaining and time.monotonic() < deadline:
        _reap_children()
        remaining = [pid for pid in remaining if alive(pid)]
        if remaining:
            time.sleep(0.05)
    _reap_children()
    return len(pids)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def job_processes(job_id: str) -> list[int]:
    """Pids of the processes whose environment carries this job's id (everything the launcher started)."""
    return pids_tagged(JOB_ID, job_id)


def open_pidfd(pid: int) -> int | None:
    """A descriptor that select() finds readable the moment process `pid` exits (None where the kernel has none),
    where polling would add up to a poll interval."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def wait_for_exit(proc: subprocess.Popen, pidfd: int | None, seconds: float,
                  wakeup_fd: int | None = None) -> int | None:
    """`proc`'s exit code once it has exited (woken by its pidfd, from open_pidfd, the moment it does); None after
    `seconds`, or at once when `wakeup_fd` is readable (a signal's)."""
    if pidfd is None:
        import subprocess  # here alone: every rank's entry imports proctree and needs no subprocess

        try:
            return proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None
    select.select([fd for fd in (pidfd, wakeup_fd) if fd is not None], [], [], seconds)
    return proc.poll()


def signal_and_wait(processes: Iterable[subprocess.Popen], sig: int, seconds: float) -> None:
    """`sig` to each of `processes` still running, then up to `seconds` for each to exit (srun steps told to stop:
    srun forwards the signal to the step's tasks)."""
    running = [process for process in processes if process.poll() is None]
    for process in running:
        process.send_signal(sig)
    for process in running:
        wait_for_exit(process, None, seconds)


def end_job_processes(job_id: str, grace: float) -> int:
    """SIGTERM every process of the job, SIGKILL what is left after `grace` seconds; returns how many were found."""
    return terminate(job_processes(job_id), grace, lambda: job_processes(job_id))


def rank_leftovers(entry_pid: int) -> list[int]:
    """What rank entry `entry_pid` started that still runs: its descendants (a subreaper entry inherits the
    orphans) and every process tagged with it, wherever it was reparented."""
    found = set(descendants(entry_pid)) | set(pids_tagged(RANK_ENTRY, str(entry_pid)))
    return sorted(found - {os.getpid(), entry_pid})  # the sh entry ends its rank through a child of its own


def end_rank_leftovers(entry_pid: int, grace: float = LEFTOVER_GRACE) -> int:
    leftovers = rank_leftovers(entry_pid)
    if not leftovers:
        return 0
    return terminate(leftovers, grace, lambda: rank_leftovers(entry_pid))


def job_temp_prefix(job_id: str) -> str:
    """The name prefix of the temporary directories a job's processes make on a host: its Spark tasks' working
    directories (trainrun.backends.spark.task), torchrun's (trainrun.torchrun)."""
    return f"trainrun-task-{job_id}-"


def job_temp_dirs(job_id: str) -> list[str]:
    """This host's temporary directories of the job that are still there (a process killed cannot remove its own);
    the runner and the watchdog remove them."""
    import glob
    import tempfile

    return glob.glob(os.path.join(glob.escape(tempfile.gettempdir()), job_temp_prefix(job_id) + "*"))


def main(argv: list[str]) -> int:
    """`python -m trainrun.proctree JOB_ID [GRACE]`: what `trainrun` runs over ssh on every other host of a job
    at its end (trainrun.remote.sweep_command); prints how many processes it ended."""
    if not argv or len(argv) > 2:
        print("usage: python -m trainrun.proctree JOB_ID [GRACE_SECONDS]", file=sys.stderr)
        return 2
    grace = float(argv[1]) if len(argv) > 1 else 5.0
    print(end_job_processes(argv[0], grace))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
