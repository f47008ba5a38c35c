"""The one runner: executes any Plan, forwards signals, enforces --timeout and tears the job down."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import tempfile
import threading
import time
import uuid

from .errors import JobFailed
from .plan import Plan
from .proctree import JOB_ID, end_job_processes
from .rank.status import STATUS_DIR, exit_code_of_returncode, first_failure
from .timestamps import TimestampedOutput

POLL_SECONDS = 0.2
# After a rank fails, the launcher (torchrun, mpirun, Spark) gets this long to stop the others itself.
LAUNCHER_GRACE = 10.0
TERM_GRACE = 5.0
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Signals:
    """Records SIGINT/SIGTERM while a job runs (main thread only) and restores the old handlers after.

    A received signal also writes to `wakeup_fd`, so a select() on it returns at once.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.wakeup_fd: int | None = None
        self._previous: dict[int, object] = {}
        self._pipe: tuple[int, int] | None = None
        self._previous_wakeup = -1

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():
            for sig in FORWARDED_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._record)
            self._pipe = os.pipe()
            os.set_blocking(self._pipe[1], False)
            self._previous_wakeup = signal.set_wakeup_fd(self._pipe[1])
            self.wakeup_fd = self._pipe[0]
        return self

    def _record(self, signum: int, frame: object) -> None:
        self.received = self.received or signum

    def __exit__(self, *exc: object) -> None:
        if self._pipe is not None:
            signal.set_wakeup_fd(self._previous_wakeup)
            for fd in self._pipe:
                os.close(fd)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _wait_for_exit(proc: subprocess.Popen, pidfd: int | None, wakeup_fd: int | None, seconds: float) -> int | None:
    """The exit code once `proc` has exited; returns None after `seconds`, or at once on a signal."""
    if pidfd is None:
        try:
            return proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None
    select.select([fd for fd in (pidfd, wakeup_fd) if fd is not None], [], [], seconds)
    return proc.poll()


def _open_pidfd(pid: int) -> int | None:
    # Wakes the runner the moment the launcher exits, where polling would add up to a poll interval.
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def run_plan(plan: Plan, timeout: float | None = None, timestamps: bool = False) -> None:
    """Run the plan to completion; raises JobFailed naming the failed rank and its exit code. With
    `timestamps`, each output line is prefixed with the time it arrived."""
    output = TimestampedOutput() if timestamps else None
    job_id = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="trainrun-") as status_dir, _Signals() as signals:
        env = {**os.environ, **plan.env, STATUS_DIR: status_dir, JOB_ID: job_id}
        if plan.remote is not None:
            # Every other host answers ssh and takes the key before anything starts anywhere (within a bound).
            from .remote import check_hosts

            check_hosts(plan.remote, env)
            if signals.received:
                raise JobFailed(128 + signals.received,
                                f"received {signal.Signals(signals.received).name}; job stopped")
        # Own process group: a terminal's Ctrl-C reaches trainrun only, which then stops the job in
        # order. Not a new session: that puts the job in its own scheduler autogroup, which cost
        # CPU-bound ranks ~0.2 s per launch on a 2-core machine (benchmarks/launch_overhead.py).
        proc = subprocess.Popen(plan.argv, env=env, process_group=0, **(output.popen_streams if output else {}))
        if output:
            output.start(proc)
        pidfd = _open_pidfd(proc.pid)
        started = time.monotonic()
        stopped: JobFailed | None = None  # set when trainrun itself stops the job: signal or --timeout
        launcher_stuck = False
        failure_seen_at: float | None = None
        while True:
            code = _wait_for_exit(proc, pidfd, signals.wakeup_fd, POLL_SECONDS)
            if code is not None:
                break
            now = time.monotonic()
            if signals.received:
                name = signal.Signals(signals.received).name
                stopped = JobFailed(128 + signals.received, f"received {name}; job stopped")
            elif timeout is not None and now - started > timeout:
                stopped = JobFailed(124, f"job exceeded --timeout {timeout:g}s; job stopped")
            elif failure_seen_at is None:
                failure_seen_at = now if first_failure(status_dir) else None
            else:
                launcher_stuck = now - failure_seen_at > LAUNCHER_GRACE
            if stopped or launcher_stuck:
                _stop(proc, job_id)
                code = proc.wait()
                break
        if pidfd is not None:
            os.close(pidfd)
        if output:
            output.drain()
        failure = first_failure(status_dir)
        if code != 0 or failure or stopped:
            end_job_processes(job_id, TERM_GRACE)
            if plan.remote is not None:
                # mpirun ends its ranks on other hosts itself; this finds any that outlived it (by job id).
                from .remote import sweep

                sweep(plan.remote, env)
    if stopped:
        raise stopped
    if failure:
        raise JobFailed(failure.exit_code, f"rank {failure.rank} exited with code {failure.exit_code}; job stopped",
                        failure.rank)
    if code != 0:
        code = exit_code_of_returncode(code)
        raise JobFailed(code, f"{os.path.basename(plan.argv[0])} exited with code {code}")


def _stop(proc: subprocess.Popen, job_id: str) -> None:
    try:
        proc.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        pass
    end_job_processes(job_id, TERM_GRACE)
    try:
        proc.wait(timeout=TERM_GRACE)
    except subprocess.TimeoutExpired:
        proc.kill()
