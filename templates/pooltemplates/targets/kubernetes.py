"""spark-submit `--conf` arguments for Spark on Kubernetes."""
from __future__ import annotations

from ..schema import PoolTemplate
from .images import default_image
from .spark_submit import conf_args


def render(template: PoolTemplate, image: str | None = None) -> str:
    conf = template.spark_conf()
    conf["spark.kubernetes.container.image"] = image or default_image(template.uses_gpus)
    if template.uses_gpus:
        # Makes each executor pod request nvidia.com/gpu: <gpu.per_executor>.
        conf["spark.executor.resource.gpu.vendor"] = "nvidia.com"
    if template.dynamic_allocation:
        # Kubernetes has no external shuffle service; executors must track their shuffle files.
        conf.setdefault("spark.dynamicAllocation.shuffleTracking.enabled", "true")
    return conf_args(conf)
