"""Rank FAIL_RANK (default 1) exits with FAIL_CODE (default 3) after FAIL_AFTER seconds; every other rank
sleeps until it is stopped. With REPORT_DIR set, each rank writes its pid there and the failing rank the
time it failed."""
import os
import sys
import time

rank = int(os.environ["RANK"])
report_dir = os.environ.get("REPORT_DIR")


def report(name: str, text: str) -> None:
    if report_dir:
        with open(os.path.join(report_dir, name), "w") as f:
            f.write(text)


report(f"pid-{rank}", str(os.getpid()))
if rank == int(os.environ.get("FAIL_RANK", "1")):
    time.sleep(float(os.environ.get("FAIL_AFTER", "1")))
    report("failed-at", repr(time.time()))
    sys.exit(int(os.environ.get("FAIL_CODE", "3")))
time.sleep(600)
