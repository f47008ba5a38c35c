"""Option checks shared by every backend; each failure names the option, the value and what is valid."""
from __future__ import annotations

from .errors import UsageError


def positive_int(option: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(option, value, "an integer >= 1")
    return value


def port(option: str, value: int) -> int:
    if not isinstance(value, int) or not 1 <= value <= 65535:
        raise UsageError(option, value, "a TCP port between 1 and 65535")
    return value


def host_port(option: str, value: str) -> tuple[str, int]:
    host, sep, number = value.rpartition(":")
    if not sep or not host or not number.isdigit():
        raise UsageError(option, value, "HOST:PORT, e.g. node0:29400")
    return host, port(option, int(number))


def key_value(option: str, value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key:
        raise UsageError(option, value, "KEY=VALUE")
    return key, val
