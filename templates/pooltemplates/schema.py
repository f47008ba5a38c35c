"""What a pool template holds, and the Spark conf each field becomes."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, NewType

# A JVM memory string ("60g"); YAML may hold a bare number, kept as text for the size rules.
Memory = NewType("Memory", str)

JobKind = Literal["plain", "barrier", "horovod", "torch-distributor"]
SerializerType = Literal["kryo", "java"]

SERIALIZER_CLASSES = {
    "kryo": "org.apache.spark.serializer.KryoSerializer",
    "java": "org.apache.spark.serializer.JavaSerializer",
}
EXECUTOR_ENV_PREFIX = "spark.executorEnv."
EXECUTOR_GPU_AMOUNT = "spark.executor.resource.gpu.amount"
EXECUTOR_GPU_DISCOVERY_SCRIPT = "spark.executor.resource.gpu.discoveryScript"
TASK_GPU_AMOUNT = "spark.task.resource.gpu.amount"


@dataclass(frozen=True)
class Driver:
    memory: Memory | None = None
    cores: int | None = None


@dataclass(frozen=True)
class Executor:
    instances: int
    cores: int | None = None
    memory: Memory | None = None
    task_cpus: int | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Gpu:
    per_executor: int = 0
    per_task: float = 1.0
    discovery_script: str | None = None
    reserve: Memory | None = None
    # GPU addresses without devices: the workers of a pool that trainrun or `invoke pool.up` starts report them, so
    # that Spark's GPU scheduling and barrier jobs run on CPUs; nothing asks a scheduler for GPUs.
    placeholders: bool = False


@dataclass(frozen=True)
class Serializer:
    type: SerializerType | None = None
    kryo_buffer_max: Memory | None = None


@dataclass(frozen=True)
class Job:
    kind: JobKind = "plain"
    processes: int | None = None


@dataclass(frozen=True)
class PoolTemplate:
    """A Spark pool: how many nodes, executors and GPUs, and how Spark should use them."""

    name: str
    description: str
    nodes: int
    executor: Executor
    driver: Driver = field(default_factory=Driver)
    gpu: Gpu = field(default_factory=Gpu)
    serializer: Serializer = field(default_factory=Serializer)
    dynamic_allocation: bool | None = None
    job: Job = field(default_factory=Job)
    conf: dict[str, str] = field(default_factory=dict)

    @property
    def uses_gpus(self) -> bool:
        return self.gpu.per_executor > 0

    def task_slots_per_executor(self) -> int:
        """Tasks one executor runs at once: the scarcer of its CPU and GPU slots."""
        # An unset executor.cores counts as 1, Spark's default on YARN and Kubernetes.
        slots = (self.executor.cores or 1) // (self.executor.task_cpus or 1)
        if self.uses_gpus:
            # The small epsilon keeps 1 / 0.1 from flooring to 9.
            slots = min(slots, math.floor(self.gpu.per_executor / self.gpu.per_task + 1e-9))
        return slots

    def total_task_slots(self) -> int:
        return self.executor.instances * self.task_slots_per_executor()

    def spark_conf(self) -> dict[str, str]:
        """The Spark conf to submit or build a SparkSession with, in a stable order."""
        conf: dict[str, str] = {}
        for spark_key in SPARK_KEYS:
            if spark_key.gpu_only and not self.uses_gpus:
                continue
            value = field_value(self, spark_key.template_field)
            if value is not None:
                conf[spark_key.key] = spark_key.to_spark(value)
        for name, value in self.executor.env.items():
            conf[EXECUTOR_ENV_PREFIX + name] = value
        conf.update(self.conf)
        return conf


def field_value(template: PoolTemplate, dotted: str) -> Any:
    value: Any = template
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def spark_value(value: Any) -> str:
    """Spark's spelling of a YAML scalar: true/false, 1 rather than 1.0."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@dataclass(frozen=True)
class SparkKey:
    key: str
    template_field: str
    gpu_only: bool = False
    to_spark: Callable[[Any], str] = spark_value


SPARK_KEYS = (
    SparkKey("spark.driver.memory", "driver.memory"),
    SparkKey("spark.driver.cores", "driver.cores"),
    SparkKey("spark.executor.instances", "executor.instances"),
    SparkKey("spark.executor.cores", "executor.cores"),
    SparkKey("spark.executor.memory", "executor.memory"),
    SparkKey("spark.task.cpus", "executor.task_cpus"),
    SparkKey("spark.dynamicAllocation.enabled", "dynamic_allocation"),
    SparkKey(EXECUTOR_GPU_AMOUNT, "gpu.per_executor", gpu_only=True),
    SparkKey(EXECUTOR_GPU_DISCOVERY_SCRIPT, "gpu.discovery_script", gpu_only=True),
    SparkKey(TASK_GPU_AMOUNT, "gpu.per_task", gpu_only=True),
    SparkKey("spark.rapids.memory.gpu.reserve", "gpu.reserve"),
    SparkKey("spark.serializer", "serializer.type", to_spark=SERIALIZER_CLASSES.__getitem__),
    SparkKey("spark.kryoserializer.buffer.max", "serializer.kryo_buffer_max"),
)


def owning_field(spark_key: str) -> str | None:
    """The template field that sets this Spark key, if any (extra conf must not set it too)."""
    if spark_key.startswith(EXECUTOR_ENV_PREFIX):
        return "executor.env." + spark_key.removeprefix(EXECUTOR_ENV_PREFIX)
    for known in SPARK_KEYS:
        if known.key == spark_key:
            return known.template_field
    return None
