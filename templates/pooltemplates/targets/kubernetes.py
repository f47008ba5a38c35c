"""spark-submit `--conf` arguments for Spark on Kubernetes."""
from __future__ import annotations

from ..schema import PoolTemplate
from .spark_submit import conf_args

# The trainstack images by their local tags; `image` names a registry reference instead.
CPU_IMAGE = "trainstack:cpu"
GPU_IMAGE = "trainstack:gpu"


def render(template: PoolTemplate, image: str | None = None) -> str:
    conf = template.spark_conf()
    conf["spark.kubernetes.container.image"] = image or (GPU_IMAGE if template.uses_gpus else CPU_IMAGE)
    if template.uses_gpus:
        # Makes each executor pod request nvidia.com/gpu: <gpu.per_executor>.
        conf["spark.executor.resource.gpu.vendor"] = "nvidia.com"
    if template.dynamic_allocation:
        # Kubernetes has no external shuffle service; executors must track their shuffle files.
        conf.setdefault("spark.dynamicAllocation.shuffleTracking.enabled", "true")
    return conf_args(conf)
