"""Where this process runs, asked in one place (`current`): in a task srun started (a Slurm step), in the shell of a
Slurm allocation where srun can start tasks (salloc, sbatch), or on this host alone. Each engine is one module of this
package with its facts, its placement and its doctor checks, as Lightning's cluster environments are (slurm.py); the
local engine's facts are the launching machine's (trainrun.machine). A new engine adds its module, its branch here and
what docs/contributing.md lists.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Callable, Literal, Mapping

from .slurm import Allocation, allocation, in_step

EngineName = Literal["slurm-step", "slurm-allocation", "local"]


@dataclass(frozen=True)
class Where:
    """The engine this process runs in, and the allocation it may start tasks in (the slurm-allocation engine's)."""

    engine: EngineName
    allocation: Allocation | None = None


def current(environ: Mapping[str, str], which: Callable[[str], str | None] = shutil.which) -> Where:
    """The engine of a process with `environ`. A task srun started launches no ranks of its own through srun; a
    shell with the job's variables but no srun (a container that `sbatch --container-image` runs the script in) is
    no allocation trainrun can start tasks in."""
    if in_step(environ):
        return Where("slurm-step")
    held = allocation(environ)
    if held is not None and which("srun"):
        return Where("slurm-allocation", held)
    return Where("local")
