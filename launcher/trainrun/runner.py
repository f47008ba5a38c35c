"""The one runner: executes any Plan, forwards signals, enforces --timeout and the exit barrier (trainrun.lifecycle),
and tears the whole job down, on success too."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Sequence

from .errors import JobFailed
from .lifecycle import Lifecycle, Stop
from .output import LINE_BUFFERED, RelayedOutput, relay_needed
from .plan import Plan
from .proctree import JOB_ID, end_job_processes, job_temp_dirs, open_pidfd, wait_for_exit
from .rank.status import STATUS_DIR, read_status
from .watchdog import Watchdog

POLL_SECONDS = 0.2
TERM_GRACE = 5.0
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Signals:
    """Records SIGINT/SIGTERM while a job runs (main thread only) and restores the old handlers after.

    A received signal also writes to `wakeup_fd`, so a select() on it returns at once.
    """

    received: int | None = None
    wakeup_fd: int | None = None

    def __enter__(self) -> "_Signals":
        self._previous: dict[int, object] = {}
        self._pipe: tuple[int, int] | None = None
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._record) for sig in FORWARDED_SIGNALS}
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


def run_plan(plan: Plan, owned_dirs: Sequence[str] = ()) -> None:
    """Run the plan to completion; raises JobFailed naming the failed rank and how it ended (exit code or signal),
    the ranks that hung at the exit barrier, or why trainrun stopped the job (plan.run: --timeout, the exit
    barrier). With plan.run.timestamp_output, each output line is prefixed with the time it arrived; output is
    relayed through sys.stdout and sys.stderr wherever they are not the process's own descriptors
    (trainrun.output). However it ends, no process of the job is left running, and a watchdog takes the job down
    if this process dies first, removing `owned_dirs` too (the caller's directories for the job, e.g. the pickled
    function of trainrun.run, which the caller removes itself when it lives). A plan's stage starts no process: it
    runs in this process, and applies plan.run itself."""
    if plan.stage is not None:
        with Watchdog(new_job_id(), list(owned_dirs)):
            return plan.stage.run(plan.run)
    timestamps = plan.run.timestamp_output
    tagged = plan.output_tags == "pieces"
    # Open MPI's tagged output is always relayed: the CLI and a notebook show it alike.
    output = RelayedOutput(timestamps, tagged, quiet=tagged and not plan.run.verbose) \
        if relay_needed(timestamps) or tagged else None
    job_id = new_job_id()
    if plan.status_parent is not None:
        os.makedirs(plan.status_parent, exist_ok=True)
    status_dir = tempfile.mkdtemp(prefix="trainrun-", dir=plan.status_parent)
    watchdog = Watchdog(job_id, [status_dir, *owned_dirs])  # before anything of the job starts
    ended = False
    try:
        with _Signals() as signals:
            env = {**os.environ, **plan.env, STATUS_DIR: status_dir, JOB_ID: job_id}
            if output:
                # The ranks write to trainrun's pipe, which Python buffers by the 8 KiB block: a line would reach a
                # notebook cell only when the block fills or the rank ends (a user's own setting stays). Unbuffered,
                # a line is written in pieces, which LINE_BUFFERED joins again where the image's hook reads it.
                env.setdefault("PYTHONUNBUFFERED", "1")
                env.setdefault(LINE_BUFFERED, "1")
            if plan.remote is not None:
                _check_hosts(plan, env, signals)
            # Own process group: a terminal's Ctrl-C reaches trainrun only, which then stops the job in
            # order. Not a new session: that puts the job in its own scheduler autogroup, which cost
            # CPU-bound ranks ~0.2 s per launch on a 2-core machine (benchmarks/launch_overhead.py).
            proc = subprocess.Popen(plan.argv, env=env, process_group=0, **(output.popen_streams if output else {}))
            if output:
                output.start(proc)
            lifecycle = Lifecycle(plan.ranks, plan.launcher, plan.run.timeout, plan.run.exit_barrier_timeout,
                                  time.monotonic())
            code, stop = _supervise(proc, lifecycle, signals, status_dir, job_id)
            # Success included: a rank's helpers, data-loader workers or anything else of the job still running go
            # (before the output is drained: what they hold open, such as its pipes, closes).
            end_job_processes(job_id, TERM_GRACE)
            ended = True
            if output:
                output.drain()
            for path in job_temp_dirs(job_id):
                shutil.rmtree(path, ignore_errors=True)
            failed = lifecycle.outcome(code, read_status(status_dir), stop)
            if plan.remote is not None and (failed is not None or stop is not None):
                _sweep_hosts(plan, env)
    finally:
        if not ended:  # an error in trainrun itself: the job goes all the same
            end_job_processes(job_id, TERM_GRACE)
        shutil.rmtree(status_dir, ignore_errors=True)
        watchdog.done()
    if stop is not None and stop.note:
        print(f"trainrun: {stop.note}", file=sys.stderr)
    if failed is not None:
        raise failed


def new_job_id() -> str:
    """32 random hex digits, as uuid4().hex gives, without importing uuid (and platform) at every launch."""
    return os.urandom(16).hex()


def _check_hosts(plan: Plan, env: dict[str, str], signals: _Signals) -> None:
    """Every other host answers ssh and takes the key before anything starts anywhere (within a bound)."""
    from .remote import check_hosts

    check_hosts(plan.remote, env)
    if signals.received:
        raise JobFailed(128 + signals.received, f"received {signal.Signals(signals.received).name}; job stopped")


def _supervise(proc: subprocess.Popen, lifecycle: Lifecycle, signals: _Signals, status_dir: str,
               job_id: str) -> tuple[int, Stop | None]:
    """Waits for the launcher to exit, checking the job's lifecycle (--timeout, the exit barrier, a signal) as it
    runs; returns the launcher's exit code, and the stop when trainrun stopped the job."""
    pidfd = open_pidfd(proc.pid)  # wakes the runner the moment the launcher exits
    try:
        while True:
            code = wait_for_exit(proc, pidfd, POLL_SECONDS, signals.wakeup_fd)
            if code is not None:
                return code, None
            stop = lifecycle.check(time.monotonic(), time.time(), read_status(status_dir), signals.received)
            if stop:
                _stop(proc, job_id)
                return proc.wait(), stop
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _sweep_hosts(plan: Plan, env: dict[str, str]) -> None:
    """mpirun ends its ranks on other hosts itself, and each rank's entry its leftovers; after a failure or a stop
    this ends, over ssh, whatever of the job outlived them there (by the job id)."""
    from .remote import sweep

    sweep(plan.remote, env)


def _stop(proc: subprocess.Popen, job_id: str) -> None:
    """SIGTERM the launcher, which stops its ranks in its own order (torchrun, mpirun); after TERM_GRACE, or at
    once when it has exited, every process of the job left gets SIGTERM, then SIGKILL."""
    try:
        proc.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=TERM_GRACE)
    except subprocess.TimeoutExpired:
        pass
    end_job_processes(job_id, TERM_GRACE)
    try:
        proc.wait(timeout=TERM_GRACE)
    except subprocess.TimeoutExpired:
        proc.kill()
