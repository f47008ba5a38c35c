"""Message sizes of the allreduce sweep: `--sizes LOW:HIGH` (doubling, as nccl-tests' -b LOW -e HIGH -f 2) or a
list `SIZE,SIZE,...`, in bytes with binary units."""
from __future__ import annotations

import re

from ..errors import UsageError

ELEMENT_BYTES = 4  # float32, the element type every allreduce of the sweep uses
MAX_BYTES = 16 << 30  # a bound, so that a typo (1000GiB) is refused instead of running out of memory
UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}
GPU_DEFAULT = "8B:1GiB"
CPU_DEFAULT = "8B:64MiB"  # Gloo and MPI on CPU cores: a 1 GiB buffer per rank takes minutes there, not seconds
VALID = (f"LOW:HIGH (doubling from LOW up to HIGH) or SIZE,SIZE,..., each a multiple of {ELEMENT_BYTES} bytes from "
         f"{ELEMENT_BYTES}B to 16GiB with B, KiB, MiB or GiB (or K, M, G), e.g. {GPU_DEFAULT} or 8B,1MiB")
_SIZE = re.compile(r"\s*(\d+)\s*([A-Za-z]*)\s*")


def parse_size(text: str) -> int | None:
    """Bytes of `64KiB`, `1M`, `8B`, `4096`; None when it is not one."""
    found = _SIZE.fullmatch(text)
    if not found or found.group(2).lower() not in UNITS:
        return None
    return int(found.group(1)) * UNITS[found.group(2).lower()]


def parse_sizes(option: str, text: str) -> tuple[int, ...]:
    """The sweep's sizes in bytes, ascending and without repeats."""
    parts = text.split(":")
    if len(parts) > 2:
        raise UsageError(option, text, valid=VALID)
    sizes = [parse_size(part) for part in (parts if len(parts) == 2 else text.split(","))]
    if any(size is None or size % ELEMENT_BYTES or not ELEMENT_BYTES <= size <= MAX_BYTES for size in sizes):
        raise UsageError(option, text, valid=VALID)
    if len(parts) == 2:
        low, high = sizes
        if low > high:
            raise UsageError(option, text, "starts above its end", valid=VALID)
        sizes = []
        while low <= high:
            sizes.append(low)
            low *= 2
    return tuple(sorted(set(sizes)))


def format_size(size: int) -> str:
    """`8B`, `64KiB`, `1GiB`; sizes that are not a whole number of the unit stay in the smaller one."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"
