"""What the image tests and the notebook checks read from a workflow's output besides its summary line."""
from __future__ import annotations

from trainstack.image.workflows import untagged_lines


def checkpoint_writers(output: str) -> list[str]:
    """The `rank N wrote PATH` lines the examples print: who wrote a checkpoint (rank 0 only, in every workflow)."""
    return [line.split(" wrote ")[0] for line in untagged_lines(output) if " wrote " in line and line.startswith("rank ")]
