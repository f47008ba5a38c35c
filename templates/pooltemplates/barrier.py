"""Checks a barrier job (TorchDistributor, Horovod on Spark, ...) against a pool before it starts."""
from __future__ import annotations

from .errors import Problem, TemplateError
from .schema import PoolTemplate
from .validation import barrier_problems


def check_barrier_job(template: PoolTemplate, num_processes: int, use_gpu: bool) -> None:
    """Raise TemplateError if `num_processes` barrier tasks (on GPUs if `use_gpu`) cannot all start."""
    problems = list(barrier_problems(template, num_processes, "num_processes"))
    if num_processes < 1:
        problems.append(Problem("num_processes", num_processes, "a job needs a process",
                                "a whole number >= 1"))
    if use_gpu and not template.uses_gpus:
        problems.append(Problem("gpu.per_executor", template.gpu.per_executor,
                                "a GPU job needs a template whose executors have GPUs",
                                "a GPU template, or run the job without GPUs"))
    if problems:
        raise TemplateError(f"barrier job on template {template.name!r}", problems)
