"""The rank status protocol: every rank entry leaves `start-N` when rank N starts and `rank-N.json` when it
ends (success included), in $TRAINRUN_STATUS_DIR, so the launcher names the first rank that failed, how it
ended (exit code or signal), and which ranks are still running when another has exited 0. This module is
its one reader and the writer of every record but one, and holds the rule that turns a process's end into
an exit code.

Writers: trainrun.rank.entry in-process (start and end), the sh entry (trainrun.rank.env: `start-N` and a
success record with shell builtins, failures through `python -m trainrun.rank.status`), and the Spark driver
for barrier tasks. Times are time.time() of the writer, or the file's mtime for the sh entry's success record.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass

STATUS_DIR = "TRAINRUN_STATUS_DIR"
# A Spark task's directory (its rank's STATUS_DIR), which the rank's entry removes when it outlives the task:
# Spark kills a cancelled task's Python worker before the task's own clean-up can run.
TASK_DIR = "TRAINRUN_TASK_DIR"


@dataclass(frozen=True)
class RankExit:
    rank: int | None
    exit_code: int
    signal: str | None = None  # "SIGKILL" when the rank was killed by a signal
    time: float = 0.0

    @property
    def failed(self) -> bool:
        return self.exit_code != 0 or self.signal is not None

    def describe(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else "a rank"
        if self.signal:
            return f"{who} was killed by {self.signal}"
        return f"{who} exited with code {self.exit_code}"


@dataclass(frozen=True)
class JobStatus:
    """What the records in one status directory say: the ranks that started (rank -> entry pid) and how each
    that ended ended."""

    started: dict[int | None, int]
    exits: dict[int | None, RankExit]

    def first_failure(self, before: float | None = None) -> RankExit | None:
        failures = [e for e in self.exits.values() if e.failed and (before is None or e.time <= before)]
        return min(failures, key=lambda e: e.time) if failures else None

    def first_success(self) -> RankExit | None:
        successes = [e for e in self.exits.values() if not e.failed]
        return min(successes, key=lambda e: e.time) if successes else None

    def running(self) -> list[int | None]:
        """Ranks that started and have not ended, in order."""
        return sorted((r for r in self.started if r not in self.exits), key=lambda r: (r is None, r or 0))


def exit_code_of(exc: SystemExit) -> int:
    """The exit code `sys.exit(code)` gives: None is 0, a message is printed and is 1."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_of_wait_status(status: int) -> tuple[int, str | None]:
    """os.wait()'s status -> (exit code as a shell gives it, the signal's name or None)."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        return 128 + number, signal_name(number)
    return os.waitstatus_to_exitcode(status), None


def exit_of_returncode(returncode: int) -> tuple[int, str | None]:
    """Popen's returncode -> (exit code, signal name or None)."""
    if returncode < 0:
        return 128 - returncode, signal_name(-returncode)
    return returncode, None


def exit_of_shell_status(code: int) -> tuple[int, str | None]:
    """`$?` in sh -> (exit code, signal). sh reports a child killed by signal N as 128 + N and cannot tell it
    from `exit 128+N`; like the shell, a status of 129..192 is taken for a signal."""
    if 128 < code <= 128 + 64:
        return code, signal_name(code - 128)
    return code, None


def _rank_text(rank: str | int | None) -> str:
    text = str(rank) if rank is not None else ""
    return text if text.isdigit() else "unknown"


def _write_atomically(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def write_start(status_dir: str, rank: str | int | None, pid: int) -> None:
    """`start-N` holding the pid of rank N's entry; a restarted rank's earlier end record goes."""
    rank_text = _rank_text(rank)
    try:
        os.unlink(os.path.join(status_dir, f"rank-{rank_text}.json"))
    except OSError:
        pass
    _write_atomically(os.path.join(status_dir, f"start-{rank_text}"), f"{pid}\n")


def write_record(status_dir: str, rank: str | int | None, exit_code: int, signal_name: str | None = None,
                 pid: int | None = None, at: float | None = None) -> None:
    """Writes rank-N.json atomically (a reader never sees half a record)."""
    rank_text = _rank_text(rank)
    record = {"rank": int(rank_text) if rank_text.isdigit() else None, "exit_code": exit_code,
              "signal": signal_name, "pid": pid, "time": time.time() if at is None else at}
    _write_atomically(os.path.join(status_dir, f"rank-{rank_text}.json"), json.dumps(record))


def _status_dir() -> str | None:
    status_dir = os.environ.get(STATUS_DIR)
    return status_dir if status_dir and os.path.isdir(status_dir) else None


def record_start(pid: int) -> None:
    """This rank's start, when the launcher asked for records ($TRAINRUN_STATUS_DIR is a directory)."""
    status_dir = _status_dir()
    if status_dir:
        write_start(status_dir, os.environ.get("RANK"), pid)


def record_exit(code: int, signal_name: str | None = None, pid: int | None = None) -> None:
    """This rank's end (success included), when the launcher asked for records."""
    status_dir = _status_dir()
    if status_dir:
        write_record(status_dir, os.environ.get("RANK"), code, signal_name, pid)


def _parse_rank(value: object) -> int | None:
    text = str(value) if value is not None else ""
    return int(text) if text.isdigit() else None


def read_status(status_dir: str) -> JobStatus:
    """Every record in status_dir; a record being written (empty, half a line) is skipped until it is whole."""
    started: dict[int | None, int] = {}
    exits: dict[int | None, RankExit] = {}
    try:
        names = os.listdir(status_dir)
    except OSError:
        return JobStatus(started, exits)
    for name in names:
        path = os.path.join(status_dir, name)
        try:
            if name.startswith("start-") and not name.endswith(".tmp"):
                with open(path) as f:
                    text = f.read().strip()
                if text.isdigit():
                    started[_parse_rank(name[len("start-"):])] = int(text)
            elif name.startswith("rank-") and name.endswith(".json"):
                with open(path) as f:
                    record = json.load(f)
                at = record.get("time")
                if not isinstance(at, (int, float)):
                    at = os.stat(path).st_mtime
                rank = _parse_rank(record.get("rank"))
                exits[rank] = RankExit(rank, int(record["exit_code"]), record.get("signal") or None, float(at))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return JobStatus(started, exits)


def first_failure(status_dir: str) -> RankExit | None:
    """The earliest failure recorded in status_dir, or None when no rank recorded one."""
    return read_status(status_dir).first_failure()


def main(argv: list[str]) -> int:
    """`python -m trainrun.rank.status [--entry PID] [--shell] CODE`: the sh entry's end of a rank, for the
    rank in $RANK: first the leftovers of entry PID (processes of the rank still running after it ended)
    go, then the record is written. --shell: CODE is `$?`, where 128 + N means killed by signal N."""
    entry = None
    shell = False
    while argv and argv[0].startswith("--"):
        if argv[0] == "--entry":
            entry, argv = int(argv[1]), argv[2:]
        elif argv[0] == "--shell":
            shell, argv = True, argv[1:]
        else:
            break
    code = int(argv[0])
    if entry is not None:
        from ..proctree import end_rank_leftovers

        end_rank_leftovers(entry)
    exit_code, signal_text = exit_of_shell_status(code) if shell else (code, None)
    record_exit(exit_code, signal_text, entry)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
