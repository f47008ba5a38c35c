"""The job's watchdog: takes the job down when the process running it (the `trainrun` CLI, or a program calling
`trainrun.run`) dies without doing so itself, e.g. killed by SIGKILL.

It is a small process of its own session (so a terminal's or a process group's signal meant for trainrun does
not reach it), started before the launcher, holding the read end of a pipe whose only write end is in
trainrun. trainrun writes `done` once it has ended the job; end of file without it means trainrun died, and the
watchdog does what trainrun would have: SIGTERM then SIGKILL every process tagged with the job's id, and
removes the job's directories.

Why not PR_SET_PDEATHSIG on the launcher alone: it reaches only the launcher, not the processes that outlive
it (a rank's helpers, Spark's Python workers, ranks whose mpirun was killed), and it fires when the thread
that started the launcher ends, which in a program calling trainrun.run from a thread is not the program's
end; setting it needs preexec_fn, which is unsafe in such threaded callers.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from .proctree import JOB_ID, end_job_processes, job_temp_dirs, open_pidfd, wait_for_exit

GRACE = 5.0
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The watchdog itself: a shell (it starts in a millisecond, where even `python -I -S` took ~10 ms of CPU beside every
# job's start) that reads trainrun's line (end of file, when trainrun died) and starts Python only then: TAKE_DOWN
# imports trainrun from its package parent. Ignoring SIGINT and SIGHUP carries over to that Python. argv: the Python,
# the package parent, the job id, the directories.
WATCH = """trap '' INT HUP
IFS= read -r said
[ "$said" = done ] || exec "$0" -I -S -c "$TRAINRUN_TAKE_DOWN" "$@"
"""
TAKE_DOWN = """import sys
sys.path.insert(0, sys.argv[1])
from trainrun.watchdog import take_down
take_down(sys.argv[2], sys.argv[3:])
"""


class Watchdog:
    def __init__(self, job_id: str, directories: list[str]) -> None:
        read_end, self._write_end = os.pipe()
        env = {k: v for k, v in os.environ.items() if k != JOB_ID}  # not a process of the job itself
        env["TRAINRUN_TAKE_DOWN"] = TAKE_DOWN
        try:
            self._proc: subprocess.Popen | None = subprocess.Popen(
                ["sh", "-c", WATCH, sys.executable, PACKAGE_PARENT, job_id, *directories], stdin=read_end,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
        except OSError:
            self._proc = None
        finally:
            os.close(read_end)

    def done(self) -> None:
        """The job has ended and been cleaned up: the watchdog exits without doing anything."""
        try:
            os.write(self._write_end, b"done\n")
        except OSError:
            pass
        os.close(self._write_end)
        if self._proc is not None:
            _wait_briefly(self._proc, 5.0)

    def __enter__(self) -> "Watchdog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.done()


def take_down(job_id: str, directories: list[str]) -> None:
    """What trainrun would have done at the job's end: every process of the job goes, then its directories."""
    end_job_processes(job_id, GRACE)
    for path in [*directories, *job_temp_dirs(job_id)]:
        shutil.rmtree(path, ignore_errors=True)


def _wait_briefly(proc: subprocess.Popen, seconds: float) -> None:
    """Reaps `proc` once it exits, within `seconds`, through its pidfd: Popen.wait's timeout polls with growing
    sleeps (about 15 ms after a watchdog's exit, at the end of every job)."""
    pidfd = open_pidfd(proc.pid)
    try:
        wait_for_exit(proc, pidfd, seconds)
    finally:
        if pidfd is not None:
            os.close(pidfd)
