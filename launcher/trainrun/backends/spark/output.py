"""Rank output from barrier tasks streamed back to the driver over TCP, with each rank's start and end.

Every connection must first prove it belongs to the job: its first line is the job's token (random per job,
made by the driver and carried to the tasks inside the task closure, never in the Spark conf, which the Spark
UI shows), compared in constant time. A connection without it is closed before anything it sent is printed
or believed, and without a word: neither a refused connection nor one that breaks prints a traceback to the
driver's stderr. The server listens on loopback when every rank is on this host (local masters).
"""
from __future__ import annotations

import hmac
import secrets
import socket
import sys
import threading
import time
from typing import Callable

from ...output import start_in_callers_context
from ...rank.status import JobStatus, RankExit

CONTROL = "\x00trainrun-"
START = CONTROL + "start "
EXIT = CONTROL + "exit "
# How long a new connection has to send the token.
HANDSHAKE_SECONDS = 10.0
MAX_TOKEN_LINE = 256
LOOPBACK = "127.0.0.1"


def new_token() -> str:
    return secrets.token_hex(32)


def is_local_master(master: str) -> bool:
    """Every executor runs on this host: local, local[N], local[*], local[N,F], local-cluster[...]."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


class OutputServer:
    """Prints every line authenticated tasks send; records each rank's start and end as the rank records of
    trainrun.rank.status (`status()`); calls `on_failure` once, for the first rank that reports failing, and
    `on_event(kind, rank, exit)` for every start and end."""

    def __init__(self, host: str, on_failure: Callable[[RankExit], None], token: str | None = None,
                 on_event: Callable[[str, int, RankExit | None], None] | None = None) -> None:
        self.token = token or new_token()
        self._sock = socket.create_server((host, 0))
        self.address = (host, self._sock.getsockname()[1])
        self.failure: RankExit | None = None
        # The address each rank's task connected from: the host it ran on.
        self.hosts: dict[int, str] = {}
        # Ranks that started (no entry pid reaches the driver: 0) and how each that ended ended.
        self._started: dict[int | None, int] = {}
        self._exits: dict[int | None, RankExit] = {}
        self.refused = 0
        self._on_failure = on_failure
        self._on_event = on_event
        self._lock = threading.Lock()
        start_in_callers_context(self._accept)  # in a notebook, the lines belong to the cell that started the job

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            start_in_callers_context(self._read, conn)

    def _authenticated(self, conn: socket.socket) -> bool:
        conn.settimeout(HANDSHAKE_SECONDS)
        line = b""
        try:
            while not line.endswith(b"\n") and len(line) <= MAX_TOKEN_LINE:
                chunk = conn.recv(1)
                if not chunk:
                    return False
                line += chunk
        except OSError:
            return False
        conn.settimeout(None)
        return hmac.compare_digest(line.rstrip(b"\r\n"), self.token.encode())

    def _read(self, conn: socket.socket) -> None:
        with conn:
            if not self._authenticated(conn):
                with self._lock:
                    self.refused += 1
                return
            # A connection that breaks (its executor went away) ends quietly: what it sent counts, and the stage's
            # end says the rest.
            try:
                with conn.makefile("r", encoding="utf-8", errors="replace") as lines:
                    for line in lines:
                        if line.startswith(CONTROL):
                            self._control(line, conn)
                        else:
                            with self._lock:
                                sys.stdout.write(line)
                                sys.stdout.flush()
            except OSError:
                pass

    def _control(self, line: str, conn: socket.socket) -> None:
        try:
            if line.startswith(START):
                rank = int(line[len(START):].split()[0])
                with self._lock:
                    self._started[rank] = 0
                    self.hosts[rank] = conn.getpeername()[0]
                if self._on_event:
                    self._on_event("start", rank, None)
            elif line.startswith(EXIT):
                rank_text, code, sig = line[len(EXIT):].split()[:3]
                self._record(RankExit(int(rank_text), int(code), None if sig == "-" else sig, time.time()))
        except (ValueError, IndexError, OSError):
            return

    def _record(self, ended: RankExit) -> None:
        with self._lock:
            self._exits.setdefault(ended.rank, ended)
            first_failure = ended.failed and self.failure is None
            if first_failure:
                self.failure = ended
        if self._on_event:
            self._on_event("exit", ended.rank, ended)
        if first_failure:
            self._on_failure(ended)

    def status(self) -> JobStatus:
        """The ranks' starts and ends reported so far."""
        with self._lock:
            return JobStatus(dict(self._started), dict(self._exits))

    def close(self) -> None:
        self._sock.close()


class OutputClient:
    def __init__(self, address: tuple[str, int], token: str) -> None:
        self._sock = socket.create_connection(address, timeout=30)
        self._sock.settimeout(None)
        self._sock.sendall(token.encode() + b"\n")

    def send_line(self, line: str) -> None:
        self._sock.sendall(line.encode("utf-8", errors="replace"))

    def send_start(self, rank: int) -> None:
        self.send_line(f"{START}{rank}\n")

    def send_exit(self, rank: int, exit_code: int, signal: str | None = None) -> None:
        self.send_line(f"{EXIT}{rank} {exit_code} {signal or '-'}\n")

    def close(self) -> None:
        self._sock.close()
