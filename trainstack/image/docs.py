"""Tables for people: `invoke matrix` prints the version table, and `invoke docs` regenerates the
README's version, GPU flavor and workflow tables from the matrix and trainstack/image/workflows.py."""
from __future__ import annotations

import shlex
from typing import Sequence

from trainrun.doctor import driver_minimum
from trainstack.image.matrix import Flavor, Matrix
from trainstack.image.naming import image_reference
from trainstack.image.workflows import Workflow

COLUMNS = ["python", "torch", "torchvision", "tensorflow", "horovod", "pyspark", "java", "openmpi", "cuda", "cudnn", "nccl"]


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def flavor_table(matrix: Matrix, gpu_only: bool = False) -> str:
    """A Markdown table: one row per flavor, one column per component ("absent" where the matrix says the flavor
    cannot hold it)."""
    flavors = [f for f in matrix.flavors.values() if f.gpu or not gpu_only]
    return _markdown_table(["flavor", *COLUMNS, "base image"],
                           [[f.name, *(_cell(f, c) for c in COLUMNS), f.base_image] for f in flavors])


def _cell(flavor: Flavor, component: str) -> str:
    if flavor.version(component):
        return str(flavor.version(component))
    return "absent" if any(entry["package"] == component for entry in flavor.absent) else "-"


def _holds(flavor: Flavor) -> str:
    frameworks = [f"PyTorch {flavor.version('torch')}"]
    frameworks.append(f"TensorFlow {flavor.version('tensorflow')}" if flavor.version("tensorflow") else "no TensorFlow")
    operations = flavor.field("horovod", "gpu_operations")
    frameworks.append(f"Horovod {flavor.version('horovod')}" + (f" ({operations.upper()})" if operations else ""))
    return ", ".join(frameworks)


def gpu_flavor_table(matrix: Matrix) -> str:
    """A Markdown table: per GPU flavor what it holds and why, its CUDA stack, the oldest NVIDIA driver
    that runs it, and the line that starts it."""
    rows = []
    for flavor in (f for f in matrix.flavors.values() if f.gpu):
        cuda = flavor.version("cuda")
        stack = f"CUDA {cuda}, cuDNN {flavor.version('cudnn')}, NCCL {flavor.version('nccl')}"
        run = f"`docker run --rm -it --gpus all --shm-size 8g {image_reference(matrix.image_name, flavor.name)}`"
        rows.append([flavor.name, _holds(flavor), " ".join(flavor.description.split()), stack,
                     f">= {driver_minimum(cuda)}", run])
    return _markdown_table(["flavor", "holds", "why", "stack", "NVIDIA driver", "run"], rows)


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
    readme = _replace_between(readme, "gpu-flavors-table", gpu_flavor_table(matrix))
    return _replace_between(readme, "workflows-table", workflow_table(workflows))
