"""A Synapse notebook `%%configure -f` cell."""
from __future__ import annotations

import json

from ..schema import EXECUTOR_GPU_AMOUNT, EXECUTOR_GPU_DISCOVERY_SCRIPT, TASK_GPU_AMOUNT, PoolTemplate

# These conf keys are the cell's top-level fields instead.
SIZING_KEYS = ("spark.driver.memory", "spark.driver.cores", "spark.executor.memory",
               "spark.executor.cores", "spark.executor.instances")
# Synapse GPU pools set up GPU scheduling themselves, one GPU per executor.
PLATFORM_GPU_KEYS = (EXECUTOR_GPU_AMOUNT, EXECUTOR_GPU_DISCOVERY_SCRIPT, TASK_GPU_AMOUNT)


def render(template: PoolTemplate) -> str:
    body = {
        "driverMemory": template.driver.memory,
        "driverCores": template.driver.cores,
        "executorMemory": template.executor.memory,
        "executorCores": template.executor.cores,
        "numExecutors": template.executor.instances,
    }
    body = {key: value for key, value in body.items() if value is not None}
    conf = {key: value for key, value in template.spark_conf().items()
            if key not in SIZING_KEYS and key not in PLATFORM_GPU_KEYS}
    if conf:
        body["conf"] = conf
    return "%%configure -f\n" + json.dumps(body, indent=2) + "\n"
