"""Host lists in the `host:slots,host:slots` form of mpirun and horovodrun."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError

LOCAL_NAMES = ("localhost", "127.0.0.1")


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


def check_capacity(option: str, num_processes: int, hosts: tuple[HostSlots, ...]) -> None:
    total = sum(h.slots for h in hosts)
    if num_processes > total:
        raise UsageError(option, num_processes, f"at most {total}, the slots in -H {','.join(map(str, hosts))}")
