"""What the images add to Ray on Spark: worker nodes sized as the executors they run in, and one token for the
processes of each Ray cluster.

`ray.util.spark.setup_ray_cluster(max_worker_nodes=N)` starts each Ray worker node in one Spark task, and with no
per-node sizes Ray sizes that node from the host its executor runs on: every core, the host's memory and nvidia-smi's
GPUs. In containers that is the host, not the executor: on `local-cluster[2,2,2048]`, whose workers have 2 GB, each
Ray worker node claimed 18 GB of a 24 GB host, and on `local-cluster[2,1,1024]` a task asking for the host's cores
never fit an executor ("Current spark cluster has no resources to launch Ray worker nodes"). The image's patch of Ray
(images/patches/ray-2.60.0-executor-sized-worker-nodes.patch) asks `executor_sized` for whatever sizes the user left
unset: the executor's cores and GPUs, and of its memory the share Ray gives a node of a host (Ray's own 0.8 buffer),
split between heap and object store as Ray splits a host's (0.3 to the object store, which Ray still caps at its
share of /dev/shm). Sizes the user passed are kept, as are Spark's `local[...]` mode (no stage scheduling, so Ray
takes spark.task.cpus) and a call that sets only one of CPUs and GPUs (Ray refuses it, saying so).

A Ray cluster with token authentication off runs the code of anyone who reaches its ports (ShadowRay,
CVE-2023-48022), and Ray on Spark listens on every interface. Ray 2.60 turns token authentication on by itself only
for a local `ray.init()` cluster, or when `~/.ray/auth_token` exists; then the head takes it and the worker nodes,
started in executors where that file is not, do not, and setup fails with `InvalidAuthToken`. The images' start hook
(ray_start_hook.py, which RAY_ON_SPARK_START_HOOK names) gives the driver, the head and every worker node the same
`authentication_env`: token mode and a token made for the cluster, held in those processes' environments only, never
in a file or a log. A RAY_AUTH_MODE the user set is kept (`disabled` turns authentication off), and so is a
RAY_AUTH_TOKEN the user gave.
"""
from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

AUTH_MODE = "RAY_AUTH_MODE"
AUTH_TOKEN = "RAY_AUTH_TOKEN"
LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*]")
# Ray on Spark's share of a host's memory for its nodes, and of a node's memory for its object store
# (ray.util.spark.utils._RAY_ON_SPARK_NODE_MEMORY_BUFFER_OFFSET, ray_constants.DEFAULT_OBJECT_STORE_MEMORY_PROPORTION).
NODE_SHARE_OF_MEMORY = 0.8
OBJECT_STORE_SHARE = 0.3
REGISTER_SECONDS = 60.0  # how long the executors' cores are waited for, where only they tell them


@dataclass(frozen=True)
class WorkerNodeSizes:
    """setup_ray_cluster's per-worker-node arguments, None where Ray decides."""

    num_cpus: int | None
    num_gpus: int | None
    heap_memory: int | None
    object_store_memory: int | None


def executor_cores(conf: Mapping[str, str], master: str, registered_cores: Iterable[int]) -> int | None:
    """An executor's cores: spark.executor.cores, a local-cluster master's, or (a standalone executor takes all of its
    worker's cores unless told) the fewest any registered executor has; None before any registered. The registered
    executors are read only when the first two do not answer."""
    if "spark.executor.cores" in conf:
        return int(conf["spark.executor.cores"])
    local_cluster = LOCAL_CLUSTER.fullmatch(master.strip())
    if local_cluster:
        return int(local_cluster.group(2))
    return min(registered_cores, default=None)


def executor_gpus(conf: Mapping[str, str]) -> int:
    """An executor's GPUs (spark.executor.resource.gpu.amount; none unless Spark gives it some)."""
    return int(float(conf.get("spark.executor.resource.gpu.amount", "0")))


def sized(given: WorkerNodeSizes, *, master: str, conf: Mapping[str, str], executor_memory_bytes: int,
          registered_cores: Iterable[int]) -> WorkerNodeSizes:
    """`given` with what the user left unset taken from one executor (see the module's text)."""
    if master == "local" or master.startswith("local["):
        return given
    num_cpus, num_gpus = given.num_cpus, given.num_gpus
    if num_cpus is None and num_gpus is None:
        cores = executor_cores(conf, master, registered_cores)
        if cores is not None:
            num_cpus, num_gpus = cores, executor_gpus(conf)
    heap_memory, object_store_memory = given.heap_memory, given.object_store_memory
    node_memory = int(executor_memory_bytes * NODE_SHARE_OF_MEMORY)
    if object_store_memory is None:
        object_store_memory = int(node_memory * OBJECT_STORE_SHARE)
    if heap_memory is None:
        heap_memory = max(node_memory - object_store_memory, 0)
    return WorkerNodeSizes(num_cpus, num_gpus, heap_memory, object_store_memory)


def executor_sized(spark_context: Any, given: WorkerNodeSizes) -> WorkerNodeSizes:
    """`sized` with the facts of a running SparkContext: its conf, master, executor memory (as Spark parsed it) and
    the cores of the executors registered so far."""
    scala_context = spark_context._jsc.sc()

    def registered_cores() -> Iterable[int]:
        # A standalone application's executors register a moment after its SparkContext starts; sized before, a
        # worker node would ask for the host's cores, and a stage no executor can hold waits forever.
        deadline = time.monotonic() + REGISTER_SECONDS
        while True:
            executors = scala_context.statusStore().executorList(True)
            cores = [summary.totalCores() for summary in (executors.apply(index) for index in range(executors.length()))
                     if summary.id() != "driver"]
            if cores or time.monotonic() > deadline:
                yield from cores
                return
            time.sleep(0.5)

    return sized(given, master=spark_context.master, conf=dict(spark_context.getConf().getAll()),
                 executor_memory_bytes=scala_context.executorMemory() * 1024 * 1024,
                 registered_cores=registered_cores())


def authentication_env(environ: Mapping[str, str], new_token=lambda: secrets.token_hex(32)) -> dict[str, str]:
    """The variables every process of a Ray cluster gets: none where the user set another mode than token."""
    if environ.get(AUTH_MODE, "token").lower() != "token":
        return {}
    return {AUTH_MODE: "token", AUTH_TOKEN: environ.get(AUTH_TOKEN) or new_token()}
