"""Finding and ending every process of one job, even those reparented away from the launcher."""
from __future__ import annotations

import os
import signal
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
