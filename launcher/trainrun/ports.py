"""Ports handed from the process that picks them to one that binds them moments later."""
from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# The ports below the ephemeral range that a pick draws from: wide enough that two picks at once rarely meet.
PICK_SPAN = 8192
PICK_TRIES = 64


def ephemeral_range(source: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """The kernel's range of ports for the source side of outgoing connections; None where it cannot be read."""
    try:
        low, high = (int(field) for field in source.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def pick_free_port(host: str = "", source: Path = EPHEMERAL_RANGE_FILE) -> int:
    """A port free right now, for a server that a later process starts on it.

    The kernel's own pick (bind to port 0) comes from the ephemeral range, which every outgoing connection on the
    host draws its source port from: between this pick and the server's bind, any connection may take the port,
    a client of that very server among them (TCP's self-connect). A port just below the range is one only a server
    can take."""
    found = ephemeral_range(source)
    if found is not None and found[0] > 1024 + PICK_SPAN:
        low = found[0]
        for port in random.sample(range(low - PICK_SPAN, low), PICK_TRIES):
            if _bindable(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
