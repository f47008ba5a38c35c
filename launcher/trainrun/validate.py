"""Option checks shared by every backend, host lists in mpirun's `host:slots,...` form included; each
failure names the option, the value and what is valid."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError

LOCAL_NAMES = ("localhost", "127.0.0.1")


def positive_int(option: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(option, value, "an integer >= 1")
    return value


def port(option: str, value: int) -> int:
    if not isinstance(value, int) or not 1 <= value <= 65535:
        raise UsageError(option, value, "a TCP port between 1 and 65535")
    return value


def rank_list(option: str, value: str, num_processes: int) -> str:
    """`0` or `0,2`: ranks of a job of `num_processes`, normalized (sorted, no repeats)."""
    parts = value.split(",")
    if not all(part.strip().isdigit() and int(part) < num_processes for part in parts):
        raise UsageError(option, value, f"rank numbers below {num_processes}, comma-separated, e.g. 0 or 0,1")
    return ",".join(str(rank) for rank in sorted({int(part) for part in parts}))


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


@dataclass(frozen=True)
class HostSlots:
    name: str
    slots: int

    def __str__(self) -> str:
        return f"{self.name}:{self.slots}"


def parse_hosts(option: str, value: str) -> tuple[HostSlots, ...]:
    hosts = []
    for entry in value.split(","):
        name, sep, slots = entry.strip().partition(":")
        if not name or (sep and not slots.isdigit()) or (sep and int(slots) < 1):
            raise UsageError(option, value, "host:slots[,host:slots...], e.g. node0:4,node1:4")
        hosts.append(HostSlots(name, int(slots) if sep else 1))
    names = [h.name for h in hosts]
    if len(set(names)) != len(names):
        raise UsageError(option, value, "each host listed once")
    return tuple(hosts)


def parse_hostfile(option: str, path: str) -> tuple[HostSlots, ...]:
    """horovodrun's and Open MPI's hostfile: one `HOST slots=N` (or `HOST`) a line; # starts a comment."""
    try:
        with open(path) as f:
            lines = [line.split("#", 1)[0].split() for line in f]
    except OSError as err:
        raise UsageError(option, path, f"a readable hostfile ({err.strerror})") from None
    entries = []
    for words in filter(None, lines):
        slots = [word.partition("=")[2] for word in words[1:] if word.startswith("slots=")]
        if len(words) > 2 or (len(words) == 2 and not slots):
            raise UsageError(option, " ".join(words), "lines of HOST or HOST slots=N")
        entries.append(f"{words[0]}:{slots[0]}" if slots else words[0])
    if not entries:
        raise UsageError(option, path, "a hostfile that lists at least one host")
    return parse_hosts(option, ",".join(entries))


def check_capacity(option: str, num_processes: int, hosts: tuple[HostSlots, ...]) -> None:
    total = sum(h.slots for h in hosts)
    if num_processes > total:
        raise UsageError(option, num_processes, f"at most {total}, the slots in -H {','.join(map(str, hosts))}")
