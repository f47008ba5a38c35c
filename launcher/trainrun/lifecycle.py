"""When a running job must be stopped, and what its end is reported as: pure decisions over the rank records
(trainrun.rank.status), the clock and the signals trainrun received, shared by every backend's run.

- SIGINT/SIGTERM to trainrun: stop, exit 128 + N.
- --timeout: stop, exit 124.
- A rank failed: the launcher (torchrun, mpirun, Spark) gets LAUNCHER_GRACE seconds to stop the others, then
  trainrun stops the job.
- Exit barrier: once a rank has exited 0, the others get --exit-barrier-timeout seconds (torchrun's agent
  uses 300) to exit too; then the job is stopped, naming the ranks that hung, exit 124. When every rank has
  exited 0 and only the launcher has not ended, it is stopped and the job is a success.
- A rank failure recorded before trainrun stopped the job is what the job reports, whatever stopped it
  (ranks killed by the stop itself record their ends later, and do not count).
"""
from __future__ import annotations

import signal
from dataclasses import dataclass

from .errors import JobFailed
from .plan import DEFAULT_EXIT_BARRIER_TIMEOUT
from .rank.status import JobStatus, RankExit, exit_of_returncode

# After a rank fails, the launcher (torchrun, mpirun, Spark) gets this long to stop the others itself.
LAUNCHER_GRACE = 10.0
TIMED_OUT = 124


@dataclass(frozen=True)
class Stop:
    """trainrun stops the job: at wall-clock time `at`, reporting `error` unless a rank failed before that
    (None: the job succeeded, with `note` to say why it was stopped)."""

    at: float
    error: JobFailed | None
    note: str | None = None


def rank_list(ranks: list[int | None]) -> str:
    names = [str(r) if r is not None else "?" for r in ranks]
    return ("rank " if len(names) == 1 else "ranks ") + ", ".join(names)


def failure_error(failure: RankExit) -> JobFailed:
    return JobFailed(failure.exit_code, f"{failure.describe()}; job stopped", failure.rank, failure.signal)


class Lifecycle:
    """Feed `check` the records on every poll while the launcher runs; `outcome` once it has ended."""

    def __init__(self, ranks: int, launcher: str, timeout: float | None = None,
                 exit_barrier_timeout: float = DEFAULT_EXIT_BARRIER_TIMEOUT, started: float = 0.0,
                 launcher_grace: float = LAUNCHER_GRACE) -> None:
        self.ranks = ranks
        self.launcher = launcher
        self.timeout = timeout
        self.exit_barrier_timeout = exit_barrier_timeout
        self.started = started
        self.launcher_grace = launcher_grace
        self._failure_seen: float | None = None

    def check(self, now: float, wall: float, status: JobStatus, received: int | None = None) -> Stop | None:
        """`now`: a monotonic clock (the one `started` is on); `wall`: time.time(), the records' clock."""
        if received:
            name = signal.Signals(received).name
            return Stop(wall, JobFailed(128 + received, f"received {name}; job stopped"))
        if self.timeout is not None and now - self.started > self.timeout:
            return Stop(wall, JobFailed(TIMED_OUT, f"job exceeded --timeout {self.timeout:g}s; job stopped"))
        failure = status.first_failure()
        if failure is not None:
            if self._failure_seen is None:
                self._failure_seen = now
            elif now - self._failure_seen > self.launcher_grace:
                return Stop(wall, failure_error(failure))
            return None
        self._failure_seen = None  # a restarted rank (torchrun --max-restarts) clears its record
        first = status.first_success()
        if first is None or wall - first.time <= self.exit_barrier_timeout:
            return None
        return self._barrier_stop(wall, first, status)

    def _barrier_stop(self, wall: float, first: RankExit, status: JobStatus) -> Stop:
        barrier = f"--exit-barrier-timeout {self.exit_barrier_timeout:g}s"
        after = f"of rank {first.rank} exiting 0" if first.rank is not None else "of a rank exiting 0"
        running = status.running()
        if running:
            return Stop(wall, JobFailed(TIMED_OUT, f"{rank_list(running)} did not exit within {barrier} {after} "
                                                   "(exit barrier); job stopped"))
        succeeded = [e for e in status.exits.values() if not e.failed]
        if len(succeeded) >= self.ranks:
            return Stop(wall, None, f"every rank exited 0 but {self.launcher} did not end within {barrier}; "
                                    "stopped it")
        return Stop(wall, JobFailed(TIMED_OUT, f"{self.launcher} did not end within {barrier} {after}, with "
                                               f"{self.ranks - len(succeeded)} of {self.ranks} ranks not seen "
                                               "exiting on this host; job stopped"))

    def reported_end(self, status: JobStatus, stop: Stop | None) -> JobFailed | None:
        """What the records and the stop say the job ended as: the first rank failure recorded before any stop,
        else the stop's reason (None: nothing says it failed)."""
        failure = status.first_failure(before=stop.at if stop else None)
        if failure is not None:
            return failure_error(failure)
        return stop.error if stop is not None else None

    def outcome(self, returncode: int, status: JobStatus, stop: Stop | None) -> JobFailed | None:
        """What the job ended as: the first rank failure recorded before any stop, else the stop's reason, else
        the launcher's own exit code."""
        reported = self.reported_end(status, stop)
        if reported is not None or stop is not None:
            return reported
        if returncode != 0:
            code, signal_text = exit_of_returncode(returncode)
            if signal_text:
                return JobFailed(code, f"{self.launcher} was killed by {signal_text}", signal=signal_text)
            return JobFailed(code, f"{self.launcher} exited with code {code}")
        return None
