"""Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1): a TrainJob and the TrainingRuntime it runs on,
for two targets: trainjob-torch (torchrun in every node) and trainjob-mpi (a launcher running mpirun
over SSH to the nodes).

The runtime is namespaced and named after the job, so the pair applies with a namespace's rights alone
and holds the template's pod settings (/dev/shm, for MPI the nodes' sizes), which a TrainJob cannot set.
"""
from __future__ import annotations

from typing import Any

from ..schema import PoolTemplate
from . import k8s, workload
from .mpijob import DEFAULT_SCRIPT as MPI_SCRIPT
from .pytorchjob import DEFAULT_SCRIPT as TORCH_SCRIPT

API_VERSION = "trainer.kubeflow.org/v1alpha1"
NEEDS = "Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1)"
# The trainer's container is named `node`, in the replicated job labelled as the trainer ancestor.
NODE = "node"
TRAINER_ANCESTOR = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}


def render_torch(template: PoolTemplate, image: str | None = None, registry: str | None = None,
                 namespace: str = k8s.DEFAULT_NAMESPACE, job_name: str | None = None,
                 script: str | None = None) -> str:
    name = job_name or template.name
    k8s.check_names(template, "trainjob-torch", job_name=name, namespace=namespace)
    workers = k8s.training_workers(template, "trainjob-torch", even=True)
    node = {"name": NODE, "image": workload.image_reference(template, image, registry),
            "volumeMounts": [k8s.shm_mount()]}
    runtime_spec = {
        "mlPolicy": {"numNodes": workers.pods, "torch": {}},
        "template": {"spec": {"replicatedJobs": [
            _replicated_job(NODE, {"containers": [node], "volumes": [k8s.shm_volume()]}, TRAINER_ANCESTOR),
        ]}},
    }
    # The torch plugin hands torchrun the nodes, node rank, processes per node and master (PET_*).
    trainer = k8s.compact({
        "command": ["torchrun", *workload.script_words(template, "trainjob-torch", script, TORCH_SCRIPT)],
        "env": k8s.env(template),
        "numNodes": workers.pods,
        "numProcPerNode": workers.processes_per_pod,
        "resourcesPerNode": k8s.executor_resources(template),
    })
    return _render(template, name, namespace, f"{name}-torch", runtime_spec, trainer)


def render_mpi(template: PoolTemplate, image: str | None = None, registry: str | None = None,
               namespace: str = k8s.DEFAULT_NAMESPACE, job_name: str | None = None,
               script: str | None = None) -> str:
    name = job_name or template.name
    k8s.check_names(template, "trainjob-mpi", job_name=name, namespace=namespace)
    workers = k8s.training_workers(template, "trainjob-mpi", even=False)
    image = workload.image_reference(template, image, registry)
    # mpirun alone runs in the launcher, sized by the template's driver. The TrainJob's resourcesPerNode
    # would size the launcher (the trainer ancestor), so the nodes' executor sizes live here.
    launcher = k8s.compact({"name": NODE, "image": image,
                            "resources": k8s.resources(template.driver.cores, template.driver.memory)})
    node = k8s.compact({
        "name": NODE,
        "image": image,
        "command": k8s.SSHD_CONTAINER_COMMAND,
        "readinessProbe": k8s.sshd_readiness_probe(),
        "resources": k8s.executor_resources(template),
        "volumeMounts": [k8s.shm_mount()],
    })
    runtime_spec = {
        "mlPolicy": {
            "numNodes": workers.pods,
            "mpi": {"mpiImplementation": "OpenMPI", "numProcPerNode": workers.processes_per_pod,
                    "sshAuthMountPath": k8s.SSH_DIR, "runLauncherAsNode": False},
        },
        "template": {"spec": {
            "network": {"publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
            "replicatedJobs": [
                _replicated_job("launcher", {**k8s.SSH_KEYS_READABLE, "containers": [launcher]}, TRAINER_ANCESTOR,
                                depends_on=[{"name": NODE, "status": "Ready"}]),
                _replicated_job(NODE, {**k8s.SSH_KEYS_READABLE, "containers": [node],
                                       "volumes": [k8s.shm_volume()]}),
            ],
        }},
    }
    program = ["python", *workload.script_words(template, "trainjob-mpi", script, MPI_SCRIPT)]
    trainer = k8s.compact({
        "command": k8s.mpirun_command(template, workers.processes, program),
        "env": k8s.env(template),
        "numNodes": workers.pods,
    })
    return _render(template, name, namespace, f"{name}-mpi", runtime_spec, trainer)


def _replicated_job(name: str, pod_spec: dict[str, Any], labels: dict[str, str] | None = None,
                    depends_on: list[dict[str, str]] | None = None) -> dict[str, Any]:
    job_template = k8s.compact({"metadata": {"labels": labels} if labels else None,
                                "spec": {"template": {"spec": pod_spec}}})
    return k8s.compact({"name": name, "dependsOn": depends_on, "template": job_template})


def _render(template: PoolTemplate, name: str, namespace: str, runtime_name: str,
            runtime_spec: dict[str, Any], trainer: dict[str, Any]) -> str:
    runtime = {"apiVersion": API_VERSION, "kind": "TrainingRuntime",
               "metadata": k8s.metadata(runtime_name, namespace), "spec": runtime_spec}
    job = {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": k8s.metadata(name, namespace),
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": runtime_name},
            "trainer": trainer,
        },
    }
    return k8s.dump(template, NEEDS, [runtime, job])
