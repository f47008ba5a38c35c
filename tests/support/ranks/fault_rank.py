"""A rank that misbehaves as FAULT says, for the lifecycle tests and benchmarks/faults.py.

Every rank writes to $REPORT_DIR: `pid-N` (its pid), `job-id` (its TRAINRUN_JOB_ID) and, when it ends by
itself, `exited-N` (the time). FAULT:
  wait              every rank sleeps until it is stopped (the harness kills a rank, or trainrun)
  hang              rank 0 exits 0 at once; rank 1 never exits
  leave-child       each rank starts `sleep` children holding its stdout (one its child, one orphaned at once),
                    then exits 0
  leave-child-fail  the same, then rank 1 exits 3 after a second while rank 0 sleeps
  fail-ignore-term  rank 1 exits 3 at FAIL_AT (a time.time(); default a second after it starts); rank 0
                    ignores SIGTERM and sleeps, so the launcher cannot stop the job quickly
"""
import os
import signal
import subprocess
import sys
import time

rank = int(os.environ["RANK"])
report_dir = os.environ["REPORT_DIR"]
fault = os.environ.get("FAULT", "wait")


def report(name: str, text: str) -> None:
    temporary = os.path.join(report_dir, f".{name}.{rank}.tmp")  # ranks write `job-id` at the same time
    with open(temporary, "w") as f:
        f.write(text)
    os.replace(temporary, os.path.join(report_dir, name))


def end(code: int) -> None:
    report(f"exited-{rank}", repr(time.time()))
    sys.stdout.flush()
    sys.exit(code)


report("job-id", os.environ.get("TRAINRUN_JOB_ID", ""))
report(f"dirs-{rank}", "\n".join(filter(None, (os.environ.get("TRAINRUN_STATUS_DIR"),
                                              os.environ.get("TRAINRUN_TASK_DIR")))))
print(f"rank {rank} started", flush=True)
if fault.startswith("leave-child"):
    child = subprocess.Popen(["sleep", "600"])  # stdout and stderr inherited: the rank's own
    subprocess.run(["sh", "-c", "sleep 600 &"])  # orphaned at once, reparented away from the rank
    report(f"child-{rank}", str(child.pid))
report(f"pid-{rank}", str(os.getpid()))
if fault == "hang":
    if rank == 0:
        end(0)
elif fault == "leave-child":
    end(0)
elif fault in ("leave-child-fail", "fail-ignore-term"):
    if rank == 1:
        time.sleep(max(1.0, float(os.environ.get("FAIL_AT", "0")) - time.time()))
        end(3)
    if fault == "fail-ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(3600)
