"""The Python a Databricks notebook runs to start Ray on Spark on the cluster the databricks target renders: one Ray
worker node per executor (setup_ray_cluster's arguments), sized as the images' Ray on Spark sizes one
(trainrun.backends.spark.ray_on_spark.sized): the executor's cores and GPUs, and of its memory the share Ray gives a
node of a host, split between heap and object store as Ray splits a host's."""
from __future__ import annotations

from ..errors import TemplateError
from ..schema import PoolTemplate
from ..units import parse_size
from . import ray_sizes

# ray_on_spark.NODE_SHARE_OF_MEMORY and OBJECT_STORE_SHARE (test_ray.py holds them equal).
NODE_SHARE_OF_MEMORY = 0.8
OBJECT_STORE_SHARE = 0.3


def setup_arguments(template: PoolTemplate) -> dict[str, int]:
    """setup_ray_cluster's keyword arguments for the template; TemplateError without the executor's sizes."""
    problems = ray_sizes.missing_sizes(template, "databricks-ray", ray_sizes.WORKER_FIELDS)
    if problems:
        raise TemplateError(f"render {template.name!r} for databricks-ray", problems)
    node_memory = int(parse_size(template.executor.memory).bytes * NODE_SHARE_OF_MEMORY)
    object_store_memory = int(node_memory * OBJECT_STORE_SHARE)
    return {
        "max_worker_nodes": template.executor.instances,
        "num_cpus_worker_node": template.executor.cores,
        # Ray on Spark takes CPUs and GPUs together or neither.
        "num_gpus_worker_node": template.gpu.per_executor,
        "memory_worker_node": node_memory - object_store_memory,
        "object_store_memory_worker_node": object_store_memory,
    }


HEADER = """\
# Rendered from pool template {name}; change the template, not this file.
# Ray on Spark in a notebook of the databricks target's cluster: a Ray worker node in each executor, sized as the
# executor. The trainstack images' start hook (RAY_ON_SPARK_START_HOOK) gives the Ray nodes a token made for the
# cluster; Databricks Runtime's own hook gives them no Ray token.
"""


def render(template: PoolTemplate) -> str:
    arguments = "".join(f"    {name}={value},\n" for name, value in setup_arguments(template).items())
    return (HEADER.format(name=template.name)
            + "import ray\n"
            "from ray.util.spark import setup_ray_cluster, shutdown_ray_cluster\n"
            "\n"
            f"setup_ray_cluster(\n{arguments})\n"
            "ray.init()\n"
            "# Ray work here, then shutdown_ray_cluster() to end the Ray cluster and free the executors.\n")
