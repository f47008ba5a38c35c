"""The rank status protocol: a rank that fails leaves `rank-N.json` in $TRAINRUN_STATUS_DIR, so the
launcher names the first rank that failed and its exit code. This module is its one writer and reader,
and holds the one rule that turns a process's end into an exit code.

Every rank entry records through it: trainrun.rank.entry in-process, the sh entry (trainrun.rank.env)
through `python -m trainrun.rank.status RANK CODE` on failure, and the Spark driver for a barrier task.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass

STATUS_DIR = "TRAINRUN_STATUS_DIR"


@dataclass(frozen=True)
class RankFailure:
    rank: int | None
    exit_code: int


def exit_code_of_returncode(returncode: int) -> int:
    """A Popen returncode as a shell reports it: killed by signal N (returncode -N) is 128 + N."""
    return returncode if returncode >= 0 else 128 - returncode


def exit_code_of(exc: SystemExit) -> int:
    """The exit code `sys.exit(code)` gives: None is 0, a message is printed and is 1."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def write_record(status_dir: str, rank: str | int | None, exit_code: int) -> None:
    """Writes rank-N.json atomically (a reader never sees half a record)."""
    rank_text = str(rank) if rank is not None else "unknown"
    path = os.path.join(status_dir, f"rank-{rank_text}.json")
    record = {"rank": int(rank_text) if rank_text.isdigit() else None, "exit_code": exit_code, "time": time.time()}
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


def record_failure(code: int) -> None:
    """This rank's failure, when the launcher asked for records ($TRAINRUN_STATUS_DIR is a directory)."""
    status_dir = os.environ.get(STATUS_DIR)
    if status_dir and os.path.isdir(status_dir):
        write_record(status_dir, os.environ.get("RANK"), code)


def first_failure(status_dir: str) -> RankFailure | None:
    """The earliest record in status_dir, or None when no rank recorded a failure."""
    records = []
    for name in os.listdir(status_dir) if os.path.isdir(status_dir) else []:
        if name.startswith("rank-") and name.endswith(".json"):
            try:
                with open(os.path.join(status_dir, name)) as f:
                    records.append(json.load(f))
            except (OSError, ValueError):
                continue
    if not records:
        return None
    first = min(records, key=lambda record: record["time"])
    return RankFailure(first["rank"], first["exit_code"])


if __name__ == "__main__":
    # `python -m trainrun.rank.status CODE`: the sh entry's record, for the rank in $RANK.
    record_failure(int(sys.argv[1]))
