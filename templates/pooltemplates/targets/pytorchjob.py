"""A training-operator v1 PyTorchJob (kubeflow.org/v1): one pod per executor, torchrun in each."""
from __future__ import annotations

from typing import Any

from .. import image_contract
from ..schema import PoolTemplate
from . import k8s, workload

DEFAULT_SCRIPT = (f"{image_contract.EXAMPLES_DIR}/ddp_torch_mnist.py", "--checkpoint-dir", "/tmp/checkpoints")
# The operator reads the master's port from the container port of this name.
MASTER_PORT = {"name": "pytorchjob-port", "containerPort": 23456}


def render(template: PoolTemplate, image: str | None = None, registry: str | None = None,
           namespace: str = k8s.DEFAULT_NAMESPACE, job_name: str | None = None,
           script: str | None = None) -> str:
    name = job_name or template.name
    k8s.check_names(template, "pytorchjob", job_name=name, namespace=namespace)
    workers = k8s.training_workers(template, "pytorchjob", even=True)
    container = k8s.compact({
        # The operator finds the training container by this name.
        "name": "pytorch",
        "image": workload.image_reference(template, image, registry),
        # torchrun takes the nodes, node rank, processes per node and master from the PET_* variables
        # the operator sets.
        "command": ["torchrun", *workload.script_words(template, "pytorchjob", script, DEFAULT_SCRIPT)],
        "env": k8s.env(template),
        "ports": [MASTER_PORT],
        "resources": k8s.executor_resources(template),
        "volumeMounts": [k8s.shm_mount()],
    })
    pod = {"spec": {"containers": [container], "volumes": [k8s.shm_volume()]}}
    replicas: dict[str, Any] = {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": pod}}
    if workers.pods > 1:
        replicas["Worker"] = {"replicas": workers.pods - 1, "restartPolicy": "OnFailure", "template": pod}
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": k8s.metadata(name, namespace),
        "spec": {
            "nprocPerNode": str(workers.processes_per_pod),
            "runPolicy": {"cleanPodPolicy": "Running"},
            "pytorchReplicaSpecs": replicas,
        },
    }
    return k8s.dump(template, "the Kubeflow training-operator v1 (kubeflow.org/v1 PyTorchJob)", [job])
