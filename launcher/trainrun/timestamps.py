"""--timestamp-output: every line the job prints, prefixed with the wall-clock time trainrun received it
(`12:04:31.250 `), on the stream it came on. Only this option puts trainrun between the job and the
terminal; without it the launcher writes to the terminal itself."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import BinaryIO

# A rank's process that outlives the launcher can hold the pipe open; trainrun does not wait for it.
DRAIN_SECONDS = 2.0


def stamped(line: bytes, now: float) -> bytes:
    clock = time.strftime("%H:%M:%S", time.localtime(now))
    return f"{clock}.{int(now % 1 * 1000):03d} ".encode() + line


def _copy_lines(source: BinaryIO, target: BinaryIO) -> None:
    for line in iter(source.readline, b""):
        target.write(stamped(line, time.time()))
        target.flush()


class TimestampedOutput:
    """Pipes for the launcher's stdout and stderr, copied line by line with a time prefix."""

    popen_streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}

    def __init__(self) -> None:
        self._threads: list[threading.Thread] = []

    def start(self, proc: subprocess.Popen) -> None:
        for source, target in ((proc.stdout, sys.stdout.buffer), (proc.stderr, sys.stderr.buffer)):
            thread = threading.Thread(target=_copy_lines, args=(source, target), daemon=True)
            thread.start()
            self._threads.append(thread)

    def drain(self) -> None:
        deadline = time.monotonic() + DRAIN_SECONDS
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
