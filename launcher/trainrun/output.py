"""Where the job's output goes. Normally the launcher writes to trainrun's own stdout and stderr file
descriptors, and trainrun stays out of the way. It relays the output itself, line by line, when
`--timestamp-output` asks for a time prefix (`12:04:31.250 `), or when Python's sys.stdout is not file
descriptor 1: in a Jupyter kernel it is the cell's output, which a child writing to fd 1 never reaches."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import BinaryIO, TextIO

# A rank's process that outlives the launcher can hold the pipe open; trainrun does not wait for it.
DRAIN_SECONDS = 2.0


def stamped(line: bytes, now: float) -> bytes:
    clock = time.strftime("%H:%M:%S", time.localtime(now))
    return f"{clock}.{int(now % 1 * 1000):03d} ".encode() + line


def writes_to_descriptor(stream: TextIO, fd: int) -> bool:
    """Whether `stream` is file descriptor `fd` itself (a terminal, a file, a pipe), so a child that inherits
    `fd` writes where the stream does."""
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):
        return False


def relay_needed(timestamps: bool) -> bool:
    return timestamps or not (writes_to_descriptor(sys.stdout, 1) and writes_to_descriptor(sys.stderr, 2))


def _copy_lines(source: BinaryIO, target: TextIO, timestamps: bool) -> None:
    for line in iter(source.readline, b""):
        if timestamps:
            line = stamped(line, time.time())
        target.write(line.decode("utf-8", errors="replace"))
        target.flush()


class RelayedOutput:
    """Pipes for the launcher's stdout and stderr, copied line by line to sys.stdout and sys.stderr (read when
    the job starts: a notebook cell's streams), each line whole, with a time prefix when asked."""

    popen_streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}

    def __init__(self, timestamps: bool = False) -> None:
        self.timestamps = timestamps
        self._threads: list[threading.Thread] = []

    def start(self, proc: subprocess.Popen) -> None:
        for source, target in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
            thread = threading.Thread(target=_copy_lines, args=(source, target, self.timestamps), daemon=True)
            thread.start()
            self._threads.append(thread)

    def drain(self) -> None:
        deadline = time.monotonic() + DRAIN_SECONDS
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
