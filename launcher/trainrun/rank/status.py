"""The rank status record: `rank-N.json` in $TRAINRUN_STATUS_DIR names a failed rank and its exit code."""
from __future__ import annotations

import os
import sys

STATUS_DIR = "TRAINRUN_STATUS_DIR"


def exit_code_of(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def record_failure(code: int) -> None:
    status_dir = os.environ.get(STATUS_DIR)
    if not status_dir or not os.path.isdir(status_dir):
        return
    import json
    import time

    rank = os.environ.get("RANK", "unknown")
    path = os.path.join(status_dir, f"rank-{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"rank": int(rank) if rank.isdigit() else None, "exit_code": code, "time": time.time()}, f)
    os.replace(path + ".tmp", path)
