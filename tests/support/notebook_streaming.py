"""What the streaming tests check of tests/image/units/stream_delays.py's measurements, on the host and in the image:
each rank's first line reached the cell within MAX_DELAY of being printed, while the cell still ran."""
from __future__ import annotations

import json

# stream_delays.py's RESULT_PREFIX (it runs in the image, where only it is mounted).
RESULT_PREFIX = "stream-delays: "
MAX_DELAY = 1.0
# The ranks sleep 4 s between their lines: a first line that came with the cell's end came less than this before it.
STREAMED_BEFORE_END = 2.0


def result_of(output: str) -> dict:
    """The measurements in stream_delays.py's output (the kernel's stderr and Spark's progress bar share it)."""
    line = next(line for line in output.splitlines() if RESULT_PREFIX in line)
    return json.loads(line.partition(RESULT_PREFIX)[2])


def check_streamed(way: str, result: dict) -> None:
    firsts = result["firsts"]
    assert result["error"] is None, result
    assert sorted(first["rank"] for first in firsts) == ["0", "1"], result["shown"]
    for first in firsts:
        assert first["delay"] < MAX_DELAY, f"{way}: rank {first['rank']}'s line took {first['delay']} s: {firsts}"
        assert first["before_end"] > STREAMED_BEFORE_END, \
            f"{way}: rank {first['rank']}'s line came with the cell's end: {firsts}"
