"""A Databricks cluster spec (Clusters API JSON)."""
from __future__ import annotations

import json
import re

from ..errors import Problem, TemplateError
from ..schema import EXECUTOR_ENV_PREFIX, EXECUTOR_GPU_AMOUNT, EXECUTOR_GPU_DISCOVERY_SCRIPT, PoolTemplate

# Azure sizes: one executor per worker node, so the node carries the executor's GPUs.
NODE_TYPE_BY_GPUS = {
    0: "Standard_D4ds_v5",
    1: "Standard_NC24ads_A100_v4",
    2: "Standard_NC48ads_A100_v4",
    4: "Standard_NC96ads_A100_v4",
}
CPU_RUNTIME = "15.4.x-scala2.12"
GPU_RUNTIME = "15.4.x-gpu-ml-scala2.12"
# A runtime version key as the Clusters API lists them (GET /api/2.1/clusters/spark-versions): 15.4.x-scala2.12,
# 14.3.x-cpu-ml-scala2.12, 16.4.x-photon-scala2.12, 17.0.x-gpu-ml-scala2.13, or a custom:... image.
RUNTIME_VERSION = re.compile(r"[0-9]+\.[0-9]+\.x(?:-[a-z0-9]+)*-scala[0-9]+\.[0-9]+|custom:[A-Za-z0-9._:/-]+")
# The node type decides cores and memory; num_workers replaces the executor count;
# Databricks GPU runtimes configure executor GPU amounts and discovery themselves.
PLATFORM_KEYS = ("spark.driver.memory", "spark.driver.cores", "spark.executor.memory",
                 "spark.executor.cores", "spark.executor.instances", EXECUTOR_GPU_AMOUNT,
                 EXECUTOR_GPU_DISCOVERY_SCRIPT)


def render(template: PoolTemplate, node_type: str | None = None,
           driver_node_type: str | None = None, spark_version: str | None = None) -> str:
    if spark_version is not None and not RUNTIME_VERSION.fullmatch(spark_version):
        raise TemplateError(f"databricks spec for {template.name!r}", [Problem(
            "spark_version", spark_version, "is not a Databricks runtime version key",
            f"e.g. {CPU_RUNTIME} or {GPU_RUNTIME} (`databricks clusters spark-versions` lists them)")])
    node_type = node_type or _default_node_type(template)
    spark_conf = {key: value for key, value in template.spark_conf().items()
                  if key not in PLATFORM_KEYS and not key.startswith(EXECUTOR_ENV_PREFIX)}
    spec = {
        "cluster_name": template.name,
        "spark_version": spark_version or (GPU_RUNTIME if template.uses_gpus else CPU_RUNTIME),
        "node_type_id": node_type,
        "driver_node_type_id": driver_node_type or node_type,
        "num_workers": template.executor.instances,
        "spark_conf": spark_conf,
        "spark_env_vars": dict(template.executor.env),
    }
    return json.dumps(spec, indent=2) + "\n"


def _default_node_type(template: PoolTemplate) -> str:
    gpus = template.gpu.per_executor
    if gpus not in NODE_TYPE_BY_GPUS:
        raise TemplateError(f"databricks spec for {template.name!r}", [Problem(
            "node_type", None, f"no default node type has {gpus} GPUs",
            "pass a node type, e.g. --node-type Standard_ND96asr_v4")])
    return NODE_TYPE_BY_GPUS[gpus]
