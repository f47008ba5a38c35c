"""spark-submit arguments for Spark on Kubernetes: the master, cluster deploy mode and `--conf` lines."""
from __future__ import annotations

import shlex

from ..errors import Problem, TemplateError
from ..schema import PoolTemplate
from . import k8s, workload
from .spark_submit import conf_args

# The API server as pods see it; from outside the cluster, the URL `kubectl cluster-info` prints.
DEFAULT_MASTER = "k8s://https://kubernetes.default.svc"
# The service account Spark's documentation creates for the driver (it creates executor pods).
DEFAULT_SERVICE_ACCOUNT = "spark"
EXECUTOR_SHM = f"spark.kubernetes.executor.volumes.emptyDir.{k8s.SHM_VOLUME}"


def kubernetes_conf(template: PoolTemplate) -> dict[str, str]:
    """The template's Spark conf plus what its executors need on Kubernetes: the GPU vendor, /dev/shm."""
    conf = template.spark_conf()
    if template.uses_gpus:
        # Makes each executor pod request nvidia.com/gpu: <gpu.per_executor>.
        conf["spark.executor.resource.gpu.vendor"] = "nvidia.com"
    conf[f"{EXECUTOR_SHM}.mount.path"] = "/dev/shm"
    conf[f"{EXECUTOR_SHM}.options.medium"] = "Memory"
    if template.dynamic_allocation:
        # Kubernetes has no external shuffle service; executors must track their shuffle files.
        conf.setdefault("spark.dynamicAllocation.shuffleTracking.enabled", "true")
    return conf


def render(template: PoolTemplate, image: str | None = None, registry: str | None = None,
           namespace: str = k8s.DEFAULT_NAMESPACE, service_account: str = DEFAULT_SERVICE_ACCOUNT,
           master: str = DEFAULT_MASTER) -> str:
    if not master.startswith("k8s://"):
        raise TemplateError(f"render {template.name!r} for kubernetes", [Problem(
            "master", master, "is not a Kubernetes master URL", "k8s://https://HOST[:PORT]")])
    k8s.check_names(template, "kubernetes", namespace=namespace)
    conf = kubernetes_conf(template)
    conf["spark.kubernetes.container.image"] = workload.image_reference(template, image, registry)
    conf["spark.kubernetes.namespace"] = namespace
    conf["spark.kubernetes.authenticate.driver.serviceAccountName"] = service_account
    return f"--master {shlex.quote(master)}\n--deploy-mode cluster\n" + conf_args(conf)
