"""The rules a template must pass before anything starts. Errors raise together; warnings return."""
from __future__ import annotations

import math
from collections.abc import Iterator

from .errors import Problem, TemplateError
from .image_contract import DISCOVERY_SCRIPT_PATH
from .schema import SERIALIZER_CLASSES, PoolTemplate, field_value, owning_field
from .units import MAX_SIZE, MIB, SIZE_EXAMPLE, parse_size

# SPARK-19006: Kryo's buffer is indexed by int, so Spark rejects a max of 2048 MiB or more.
KRYO_BUFFER_LIMIT_MIB = 2048
BARRIER_KINDS = ("barrier", "horovod", "torch-distributor")
# PySpark 4.3's TorchDistributor(local_mode=False) (_get_num_tasks) reads this with int(): a fraction raises
# ValueError, 0 a RuntimeError; it runs num_processes / amount barrier tasks of `amount` processes each.
TORCH_DISTRIBUTOR_RULE = "PySpark's TorchDistributor reads spark.task.resource.gpu.amount with int()"
# The counts' ranges: the least Spark runs with, and maxima far above real pools, so that a typo such as
# executor.cores=1000000 is refused: the largest hosts have 768 hardware threads and 16 GPUs, and the largest
# Spark clusters reported run some thousands of nodes.
COUNT_RANGES = {
    "nodes": (1, 10_000),
    "executor.instances": (1, 100_000),
    "executor.cores": (1, 1024),
    "executor.task_cpus": (1, 1024),
    "driver.cores": (1, 1024),
    "gpu.per_executor": (0, 64),
    "job.processes": (1, 100_000),
}


def validate(template: PoolTemplate) -> list[Problem]:
    """Check every rule; raise TemplateError with all errors, else return the warnings."""
    count_errors = list(_counts(template))
    errors = [*count_errors, *_sizes(template), *_kryo_buffer(template),
              *_discovery_script(template), *_extra_conf(template)]
    if not {problem.field for problem in count_errors} & {"gpu.per_executor", "gpu.per_task"}:
        errors += _gpu_amounts(template)
    if not count_errors:  # the rules below compute task slots from these counts
        errors += [*_task_cpus(template), *_barrier(template),
                   *_horovod(template),
                   *torch_distributor_problems(template, template.job.processes, "job.processes")]
    if errors:
        raise TemplateError(f"template {template.name!r}", errors)
    return [*_gpu_reserve_warnings(template), *_serializer_warnings(template)]


def _counts(template: PoolTemplate) -> Iterator[Problem]:
    for field, (minimum, maximum) in COUNT_RANGES.items():
        value = field_value(template, field)
        if value is not None and not minimum <= value <= maximum:
            rule = f"must be at least {minimum}" if value < minimum else f"must be at most {maximum}"
            yield Problem(field, value, rule, f"a whole number from {minimum} to {maximum}")
    if template.gpu.per_task <= 0:
        yield Problem("gpu.per_task", template.gpu.per_task, "must be above 0",
                      "a fraction 1/n such as 0.5 or 0.25, or a whole number")


def _sizes(template: PoolTemplate) -> Iterator[Problem]:
    required_unit = {
        "driver.memory": template.driver.memory,
        "executor.memory": template.executor.memory,
        "serializer.kryo_buffer_max": template.serializer.kryo_buffer_max,
    }
    for field, text in required_unit.items():
        if text is None:
            continue
        try:
            size = parse_size(text)
        except ValueError as exc:
            yield Problem(field, text, f"memory string does not parse: {exc}", SIZE_EXAMPLE)
            continue
        if not size.has_unit:
            yield Problem(field, text, "needs a unit: Spark reads a bare number here as MiB, "
                          "not bytes", f"{text}m if MiB was meant, or {SIZE_EXAMPLE}")
        elif size.bytes == 0:
            yield Problem(field, text, "must be above 0", SIZE_EXAMPLE)
        elif size.bytes > MAX_SIZE:
            yield Problem(field, text, "is larger than any machine's memory", SIZE_EXAMPLE)
    if template.gpu.reserve is not None:
        try:
            reserve = parse_size(template.gpu.reserve)
        except ValueError as exc:
            yield Problem("gpu.reserve", template.gpu.reserve,
                          f"memory string does not parse: {exc}", SIZE_EXAMPLE)
            return
        if reserve.bytes > MAX_SIZE:
            yield Problem("gpu.reserve", template.gpu.reserve, "is larger than any GPU's memory", SIZE_EXAMPLE)


def _kryo_buffer(template: PoolTemplate) -> Iterator[Problem]:
    text = template.serializer.kryo_buffer_max
    if text is None:
        return
    try:
        size = parse_size(text)
    except ValueError:
        return  # _sizes reports it
    if size.bytes // MIB >= KRYO_BUFFER_LIMIT_MIB:
        yield Problem("serializer.kryo_buffer_max", text,
                      f"spark.kryoserializer.buffer.max must be below {KRYO_BUFFER_LIMIT_MIB}m "
                      "(SPARK-19006)", "at most 2047m, e.g. 2000m")


def _task_cpus(template: PoolTemplate) -> Iterator[Problem]:
    cores, task_cpus = template.executor.cores, template.executor.task_cpus
    if cores is not None and task_cpus is not None and task_cpus > cores:
        yield Problem("executor.task_cpus", task_cpus,
                      f"a task needs more CPUs than an executor has (executor.cores = {cores})",
                      f"a whole number from 1 to {cores}")


def _gpu_amounts(template: PoolTemplate) -> Iterator[Problem]:
    per_executor, per_task = template.gpu.per_executor, template.gpu.per_task
    if not template.uses_gpus:
        return
    if per_task > 1 and not per_task.is_integer():
        yield Problem("gpu.per_task", per_task,
                      "a task GPU amount above 1 must be a whole number",
                      _dividing_amounts(per_executor))
        return
    tasks_per_executor = per_executor / per_task
    if not math.isclose(tasks_per_executor, round(tasks_per_executor), rel_tol=1e-9):
        yield Problem("gpu.per_task", per_task,
                      f"must divide gpu.per_executor ({per_executor}) into a whole number of tasks",
                      _dividing_amounts(per_executor))


def _dividing_amounts(per_executor: int) -> str:
    return _whole_divisors(per_executor) + ", or a fraction 1/n such as 0.5, 0.25, 0.125"


def _whole_divisors(per_executor: int) -> str:
    return ", ".join(str(n) for n in range(1, per_executor + 1) if per_executor % n == 0)


def _discovery_script(template: PoolTemplate) -> Iterator[Problem]:
    if template.uses_gpus and not template.gpu.discovery_script:
        yield Problem("gpu.discovery_script", template.gpu.discovery_script,
                      "a GPU template needs a discovery script so executors can find their GPUs",
                      "the path of a script printing {\"name\": \"gpu\", \"addresses\": [...]}, "
                      f"e.g. {DISCOVERY_SCRIPT_PATH}")


def _barrier(template: PoolTemplate) -> Iterator[Problem]:
    if template.job.kind not in BARRIER_KINDS:
        return
    yield from barrier_problems(template, template.job.processes, "job.processes", _processes_per_task(template))


def _processes_per_task(template: PoolTemplate) -> int:
    """A TorchDistributor task runs one process per GPU it holds; any other barrier task, one process."""
    if template.job.kind == "torch-distributor" and template.uses_gpus and template.gpu.per_task >= 1:
        return int(template.gpu.per_task)
    return 1


def torch_distributor_problems(template: PoolTemplate, processes: int | None,
                               processes_field: str) -> Iterator[Problem]:
    """Why TorchDistributor(use_gpu=True, local_mode=False) would fail on this pool's GPU amounts."""
    if template.job.kind != "torch-distributor" or not template.uses_gpus:
        return
    per_task = template.gpu.per_task
    if per_task < 1 or not float(per_task).is_integer():
        yield Problem("gpu.per_task", per_task,
                      f"{TORCH_DISTRIBUTOR_RULE}, so a TorchDistributor job needs whole GPUs per task",
                      f"a whole number that divides gpu.per_executor: {_whole_divisors(template.gpu.per_executor)}")
    elif processes is not None and processes % int(per_task):
        yield Problem(processes_field, processes,
                      f"TorchDistributor needs num_processes to be a multiple of spark.task.resource.gpu.amount "
                      f"({int(per_task)})", f"a multiple of {int(per_task)}")


def barrier_problems(template: PoolTemplate, processes: int | None, processes_field: str,
                     processes_per_task: int = 1) -> Iterator[Problem]:
    """Why a barrier stage running `processes` (`processes_per_task` in each task) would fail on this pool
    (SPARK-24954, SPARK-24819)."""
    if template.dynamic_allocation:
        yield Problem("dynamic_allocation", True,
                      "barrier jobs fail fast with dynamic allocation on (SPARK-24954)", "false")
    slots = template.total_task_slots()
    per_slot = "process" if processes_per_task == 1 else f"{processes_per_task} processes"
    if processes is not None and math.ceil(processes / processes_per_task) > slots:
        yield Problem(processes_field, processes,
                      f"a barrier job needs a task slot per {per_slot}; the pool has {slots} "
                      f"({template.executor.instances} executors x "
                      f"{template.task_slots_per_executor()} slots) (SPARK-24819)",
                      f"at most {slots * processes_per_task}, or more executors, cores or GPUs")


def _horovod(template: PoolTemplate) -> Iterator[Problem]:
    if template.job.kind == "horovod" and template.executor.instances > template.nodes:
        yield Problem("executor.instances", template.executor.instances,
                      f"Horovod on Spark needs numExecutors <= nodes ({template.nodes})",
                      f"at most {template.nodes}: one executor per node with all its GPUs")


def _extra_conf(template: PoolTemplate) -> Iterator[Problem]:
    for key in template.conf:
        field = owning_field(key)
        if field is not None:
            yield Problem(f"conf.{key}", template.conf[key],
                          f"is set by the template field {field}", f"set {field} instead")
        elif not key.startswith("spark."):
            yield Problem(f"conf.{key}", template.conf[key],
                          "Spark ignores conf keys outside spark.*", "a key starting with spark.")


def _gpu_reserve_warnings(template: PoolTemplate) -> Iterator[Problem]:
    reserve = template.gpu.reserve
    if reserve is None:
        return
    if not parse_size(reserve).has_unit:
        yield Problem("gpu.reserve", reserve,
                      "has no unit, so spark.rapids.memory.gpu.reserve reads it as bytes",
                      f"a unit if bytes were not meant, e.g. {reserve}m or 10g")
    if not template.uses_gpus:
        yield Problem("gpu.reserve", reserve, "has no effect in a template without GPUs",
                      "leave it unset, or set gpu.per_executor")


def _serializer_warnings(template: PoolTemplate) -> Iterator[Problem]:
    buffer_max = template.serializer.kryo_buffer_max
    if template.serializer.type == "java" and buffer_max is not None:
        yield Problem("serializer.kryo_buffer_max", buffer_max,
                      f"has no effect with {SERIALIZER_CLASSES['java']}",
                      "serializer.type: kryo, or leave kryo_buffer_max unset")


def check_barrier_job(template: PoolTemplate, num_processes: int, use_gpu: bool) -> None:
    """Raise TemplateError if `num_processes` barrier tasks (on GPUs if `use_gpu`) cannot all start."""
    problems = list(barrier_problems(template, num_processes, "num_processes", _processes_per_task(template)))
    if num_processes < 1:
        problems.append(Problem("num_processes", num_processes, "a job needs a process",
                                "a whole number >= 1"))
    if use_gpu:
        problems += torch_distributor_problems(template, num_processes, "num_processes")
    if use_gpu and not template.uses_gpus:
        problems.append(Problem("gpu.per_executor", template.gpu.per_executor,
                                "a GPU job needs a template whose executors have GPUs",
                                "a GPU template, or run the job without GPUs"))
    if problems:
        raise TemplateError(f"barrier job on template {template.name!r}", problems)
