"""Rank FAIL_RANK exits with FAIL_CODE after a moment; every other rank blocks in a collective or sleeps."""
import os
import sys
import time

rank = int(os.environ["RANK"])
with open(os.path.join(os.environ["REPORT_DIR"], f"pid-{rank}"), "w") as f:
    f.write(str(os.getpid()))
if rank == int(os.environ.get("FAIL_RANK", "1")):
    time.sleep(float(os.environ.get("FAIL_AFTER", "1")))
    with open(os.path.join(os.environ["REPORT_DIR"], "failed-at"), "w") as f:
        f.write(repr(time.time()))
    sys.exit(int(os.environ.get("FAIL_CODE", "3")))
time.sleep(600)
