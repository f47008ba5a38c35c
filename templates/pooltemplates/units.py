"""Memory strings the way Spark reads them (JavaUtils.byteStringAs): whole numbers, binary units."""
from __future__ import annotations

import re
from dataclasses import dataclass

UNIT_BYTES = {
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "p": 1 << 50,
    "pb": 1 << 50,
}
MIB = UNIT_BYTES["m"]
# No setting of one driver, executor or GPU holds more: the largest single machines have 32 TiB of memory.
MAX_SIZE = 64 * UNIT_BYTES["t"]
MAX_SIZE_DIGITS = 20  # Spark's sizes are Java longs, at most 19 digits
SIZE_EXAMPLE = "a whole number with a unit b, k, m, g, t or p, at most 64t, e.g. 512m or 60g"

_SIZE = re.compile(r"([0-9]+)([a-z]+)?")
_FRACTIONAL = re.compile(r"[0-9]+\.[0-9]+([a-z]+)?")


@dataclass(frozen=True)
class Size:
    bytes: int
    has_unit: bool


def parse_size(text: str) -> Size:
    """Parse '60g', '2000m', '10737418240'; raises ValueError saying what is wrong."""
    normalized = text.strip().lower()
    if _FRACTIONAL.fullmatch(normalized):
        raise ValueError("Spark does not accept fractional sizes")
    match = _SIZE.fullmatch(normalized)
    if not match:
        raise ValueError("is not a memory size")
    number, unit = match.groups()
    if len(number) > MAX_SIZE_DIGITS:
        raise ValueError(f"has more than {MAX_SIZE_DIGITS} digits")
    if unit is None:
        return Size(int(number), has_unit=False)
    if unit not in UNIT_BYTES:
        raise ValueError(f"unknown unit {unit!r}")
    return Size(int(number) * UNIT_BYTES[unit], has_unit=True)


def scale_size(text: str, factor: int) -> str:
    """Multiply a size with a unit, written in the largest unit that keeps it whole."""
    if factor == 1:
        return text
    total = parse_size(text).bytes * factor
    for unit in ("p", "t", "g", "m", "k"):
        if total % UNIT_BYTES[unit] == 0:
            return f"{total // UNIT_BYTES[unit]}{unit}"
    return f"{total}b"
