"""A spark-operator SparkApplication (sparkoperator.k8s.io/v1beta2) running a PySpark script."""
from __future__ import annotations

from typing import Any

from .. import image_contract
from ..schema import PoolTemplate
from . import k8s, workload
from .kubernetes import DEFAULT_MASTER, kubernetes_conf

# The service account the spark-operator Helm chart makes in job namespaces (release "spark-operator").
DEFAULT_SERVICE_ACCOUNT = "spark-operator-spark"
# TorchDistributor on the pool's executors; the example's own default master is local[2].
DEFAULT_SCRIPT = (f"{image_contract.EXAMPLES_DIR}/torch_distributor_mnist.py", "--master", DEFAULT_MASTER)
# Fields of the SparkApplication's driver and executor specs instead of sparkConf entries.
SPEC_FIELDS = {
    "spark.driver.cores": ("driver", "cores", int),
    "spark.driver.memory": ("driver", "memory", str),
    "spark.executor.instances": ("executor", "instances", int),
    "spark.executor.cores": ("executor", "cores", int),
    "spark.executor.memory": ("executor", "memory", str),
}


def render(template: PoolTemplate, image: str | None = None, registry: str | None = None,
           namespace: str = k8s.DEFAULT_NAMESPACE, job_name: str | None = None,
           service_account: str = DEFAULT_SERVICE_ACCOUNT, script: str | None = None) -> str:
    name = job_name or template.name
    k8s.check_names(template, "spark-application", job_name=name, namespace=namespace)
    conf = kubernetes_conf(template)
    roles: dict[str, dict[str, Any]] = {"driver": {"serviceAccount": service_account}, "executor": {}}
    for key, (role, field, kind) in SPEC_FIELDS.items():
        if key in conf:
            roles[role][field] = kind(conf.pop(key))
    application_file, *arguments = workload.script_words(template, "spark-application", script, DEFAULT_SCRIPT)
    spec = {
        "type": "Python",
        "mode": "cluster",
        "image": workload.image_reference(template, image, registry),
        "sparkVersion": k8s.SPARK_VERSION,
        "mainApplicationFile": application_file if "://" in application_file else f"local://{application_file}",
        "restartPolicy": {"type": "Never"},
        "sparkConf": conf,
        **roles,
    }
    if arguments:
        spec["arguments"] = arguments
    application = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                   "metadata": k8s.metadata(name, namespace), "spec": spec}
    return k8s.dump(template, "the Kubeflow Spark operator v2 (sparkoperator.k8s.io/v1beta2)", [application],
                    notes=(k8s.RAY_ON_SPARK_NOTE,))
