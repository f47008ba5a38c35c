"""Finding and ending every process of one job, even those reparented away from the launcher."""
from __future__ import annotations

import os
import signal
import sys
import time

JOB_ID = "TRAINRUN_JOB_ID"


def job_processes(job_id: str) -> list:
    """Processes whose environment carries this job's id (ranks inherit it through every launcher)."""
    import psutil

    found = []
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if proc.environ().get(JOB_ID) == job_id:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def end_job_processes(job_id: str, grace: float) -> int:
    """SIGTERM every process of the job, SIGKILL what is left after `grace` seconds; returns how many were found."""
    import psutil

    procs = job_processes(job_id)
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive + job_processes(job_id):
        try:
            proc.kill()
        except psutil.Error:
            pass
    deadline = time.monotonic() + grace
    while job_processes(job_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    return len(procs)


def main(argv: list[str]) -> int:
    """`python -m trainrun.proctree JOB_ID [GRACE]`: what `trainrun` runs over ssh on every other host of a job
    that failed or was stopped (trainrun.remote.sweep_command); prints how many processes it ended."""
    if not argv or len(argv) > 2:
        print("usage: python -m trainrun.proctree JOB_ID [GRACE_SECONDS]", file=sys.stderr)
        return 2
    grace = float(argv[1]) if len(argv) > 1 else 5.0
    print(end_job_processes(argv[0], grace))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
