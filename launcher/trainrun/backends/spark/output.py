"""Rank output from barrier tasks streamed back to the driver over TCP, with a failure message."""
from __future__ import annotations

import socket
import sys
import threading
from dataclasses import dataclass
from typing import Callable

FAIL_PREFIX = "\x00trainrun-fail "


@dataclass(frozen=True)
class ReportedFailure:
    rank: int
    exit_code: int


class OutputServer:
    """Prints every line tasks send; calls `on_failure` once, for the first rank that reports failing."""

    def __init__(self, host: str, on_failure: Callable[[ReportedFailure], None]) -> None:
        self._sock = socket.create_server((host, 0))
        self.address = (host, self._sock.getsockname()[1])
        self.failure: ReportedFailure | None = None
        self._on_failure = on_failure
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        with conn, conn.makefile("r", encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if line.startswith(FAIL_PREFIX):
                    rank, code = line[len(FAIL_PREFIX):].split()
                    self._record(ReportedFailure(int(rank), int(code)))
                else:
                    with self._lock:
                        sys.stdout.write(line)
                        sys.stdout.flush()

    def _record(self, failure: ReportedFailure) -> None:
        with self._lock:
            if self.failure is not None:
                return
            self.failure = failure
        self._on_failure(failure)

    def close(self) -> None:
        self._sock.close()


class OutputClient:
    def __init__(self, address: tuple[str, int]) -> None:
        self._sock = socket.create_connection(address, timeout=30)
        self._sock.settimeout(None)

    def send_line(self, line: str) -> None:
        self._sock.sendall(line.encode("utf-8", errors="replace"))

    def send_failure(self, rank: int, exit_code: int) -> None:
        self.send_line(f"{FAIL_PREFIX}{rank} {exit_code}\n")

    def close(self) -> None:
        self._sock.close()
