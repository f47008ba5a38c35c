"""Tables for people: `invoke matrix` prints the version table, and `invoke docs` regenerates the
README's version and workflow tables from the matrix and trainstack/workflows.py."""
from __future__ import annotations

import shlex
from typing import Sequence

from trainstack.matrix import Matrix
from trainstack.workflows import Workflow

COLUMNS = ["python", "torch", "tensorflow", "horovod", "pyspark", "java", "openmpi", "cuda", "cudnn", "nccl"]


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def flavor_table(matrix: Matrix, gpu_only: bool = False) -> str:
    """A Markdown table: one row per flavor, one column per component."""
    flavors = [f for f in matrix.flavors.values() if f.gpu or not gpu_only]
    return _markdown_table(["flavor", *COLUMNS, "base image"],
                           [[f.name, *(f.version(c) or "-" for c in COLUMNS), f.base_image] for f in flavors])


def workflow_table(workflows: Sequence[Workflow]) -> str:
    """A Markdown table: each workflow users bring, and the command that runs it in the image."""
    return _markdown_table(["workflow", "what users bring", "command in the image"],
                           [[w.name, w.origin, f"`{shlex.join(w.command)}`"] for w in workflows])


def _replace_between(text: str, marker: str, content: str) -> str:
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    before, found_start, rest = text.partition(start)
    _, found_end, after = rest.partition(end)
    if not found_start or not found_end:
        raise ValueError(f"README lacks the {start} ... {end} markers")
    return f"{before}{start}\n{content}\n{end}{after}"


def with_generated_tables(readme: str, matrix: Matrix, workflows: Sequence[Workflow]) -> str:
    """The README text with its generated tables replaced."""
    readme = _replace_between(readme, "matrix-table", flavor_table(matrix))
    return _replace_between(readme, "workflows-table", workflow_table(workflows))
