"""Tables of the matrix: `invoke matrix` prints one, and the README's version table is generated from it."""
from __future__ import annotations

from trainstack.matrix import Matrix

COLUMNS = ["python", "torch", "tensorflow", "horovod", "pyspark", "java", "openmpi", "cuda", "cudnn", "nccl"]


def flavor_table(matrix: Matrix, gpu_only: bool = False) -> str:
    """A Markdown table: one row per flavor, one column per component."""
    flavors = [f for f in matrix.flavors.values() if f.gpu or not gpu_only]
    header = ["flavor", *COLUMNS, "base image"]
    rows = [[f.name, *(f.version(c) or "-" for c in COLUMNS), f.base_image] for f in flavors]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


TABLE_START = "<!-- matrix-table:start -->"
TABLE_END = "<!-- matrix-table:end -->"


def with_matrix_table(readme: str, matrix: Matrix) -> str:
    """The README text with the generated table between its markers replaced."""
    before, start, rest = readme.partition(TABLE_START)
    _, end, after = rest.partition(TABLE_END)
    if not start or not end:
        raise ValueError(f"README lacks the {TABLE_START} ... {TABLE_END} markers")
    return f"{before}{TABLE_START}\n{flavor_table(matrix)}\n{TABLE_END}{after}"
