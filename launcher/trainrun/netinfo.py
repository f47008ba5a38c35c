"""Network facts: the primary interface and the interface that holds an address."""
from __future__ import annotations


def default_route_interface(route_table: str = "/proc/net/route") -> str | None:
    """The interface of the default route, which multi-node NCCL and Gloo should use."""
    try:
        with open(route_table) as f:
            rows = [line.split() for line in f.readlines()[1:]]
    except OSError:
        return None
    for row in rows:
        if len(row) > 2 and row[1] == "00000000":
            return row[0]
    return None


def interface_for_address(address: str) -> str | None:
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == address for a in addrs):
            return name
    return None
