"""An mpi-operator v2 MPIJob (kubeflow.org/v2beta1): a launcher running mpirun, one worker pod per executor."""
from __future__ import annotations

from .. import image_contract
from ..schema import PoolTemplate
from . import k8s, workload

DEFAULT_SCRIPT = (f"{image_contract.EXAMPLES_DIR}/horovod_torch_mnist.py", "--checkpoint-dir", "/tmp/checkpoints")


def render(template: PoolTemplate, image: str | None = None, registry: str | None = None,
           namespace: str = k8s.DEFAULT_NAMESPACE, job_name: str | None = None,
           script: str | None = None) -> str:
    name = job_name or template.name
    k8s.check_names(template, "mpijob", job_name=name, namespace=namespace)
    workers = k8s.training_workers(template, "mpijob", even=False)
    image = workload.image_reference(template, image, registry)
    program = ["python", *workload.script_words(template, "mpijob", script, DEFAULT_SCRIPT)]
    launcher = k8s.compact({
        "name": "launcher",
        "image": image,
        "command": k8s.mpirun_command(template, workers.processes, program),
        "env": k8s.env(template),
        # mpirun alone runs here; the template's driver sizes it.
        "resources": k8s.resources(template.driver.cores, template.driver.memory),
    })
    worker = k8s.compact({
        "name": "worker",
        "image": image,
        "command": k8s.SSHD_CONTAINER_COMMAND,
        "readinessProbe": k8s.sshd_readiness_probe(),
        "resources": k8s.executor_resources(template),
        "volumeMounts": [k8s.shm_mount()],
    })
    job = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": k8s.metadata(name, namespace),
        "spec": {
            "slotsPerWorker": workers.processes_per_pod,
            "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": k8s.SSH_DIR,
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {**k8s.SSH_KEYS_READABLE, "containers": [launcher]}}},
                "Worker": {"replicas": workers.pods, "template": {"spec": {
                    **k8s.SSH_KEYS_READABLE, "containers": [worker], "volumes": [k8s.shm_volume()]}}},
            },
        },
    }
    return k8s.dump(template, "the Kubeflow MPI operator v0.6 or later (kubeflow.org/v2beta1 MPIJob)", [job])
