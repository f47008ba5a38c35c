"""What every Kubernetes target shares: names, pod resources, /dev/shm, the executors' env, how a template's
executors become training pods and processes, MPI over SSH, YAML output with its header, and the header's line on Ray
on Spark (the image and the script: workload.py)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from .. import image_contract
from ..errors import Problem, TemplateError
from ..schema import PoolTemplate
from ..units import UNIT_BYTES, parse_size

SPARK_VERSION = "4.3.0"
DEFAULT_NAMESPACE = "default"

GPU_RESOURCE = "nvidia.com/gpu"
SHM_VOLUME = "dshm"
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
# Spark's binary units become Kubernetes' (g -> Gi); a size in bytes stays a plain number.
_QUANTITY_UNITS = (("p", "Pi"), ("t", "Ti"), ("g", "Gi"), ("m", "Mi"), ("k", "Ki"))

# MPI over SSH (mpi-operator and Kubeflow Trainer's MPI runtime mount an SSH key pair, with the public key as
# authorized_keys, at SSH_DIR). Workers run the image's `trainstack-sshd` (images/scripts/trainstack-sshd):
# sshd as the image's user on its port, key-only, authorizing ~/.ssh/authorized_keys, with a host key made at
# start (none is in the image), and the image's PATH for commands run over ssh (orted, python).
SSH_DIR = f"{image_contract.IMAGE_HOME}/.ssh"
SSHD_CONTAINER_COMMAND = [image_contract.SSHD_COMMAND]
# The mounted SSH keys belong to root; this group lets the image's user read them.
SSH_KEYS_READABLE = {"securityContext": {"fsGroup": image_contract.IMAGE_USER_UID}}
# On the mpirun command line, because the operators set OMPI_MCA_plm_rsh_args themselves; worker host
# keys are new with every job.
SSH_CLIENT_ARGS = (f"-p {image_contract.SSHD_PORT} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                   "-o ConnectionAttempts=10")
# Said by the targets that run Spark on Kubernetes: Ray refuses k8s:// masters, and its maintainers send Kubernetes
# users to KubeRay (ray-project/ray#47716).
RAY_ON_SPARK_NOTE = ("Ray on Spark (ray.util.spark.setup_ray_cluster) is not for k8s:// masters; for Ray on Kubernetes "
                     "render --target rayjob (KubeRay).")


@dataclass(frozen=True)
class Workers:
    """A training job's pods (one per executor) and the processes they run."""

    pods: int
    processes_per_pod: int
    processes: int


def training_workers(template: PoolTemplate, target: str, even: bool) -> Workers:
    """The template's executors as training pods, each with an executor's task slots as processes
    (job.processes in all, else every slot).

    `even`: the launcher starts the same number of processes in every pod (torchrun), so
    job.processes must divide among them. Raises TemplateError where the template cannot be expressed.
    """
    pods, slots = template.executor.instances, template.task_slots_per_executor()
    processes = template.job.processes or pods * slots
    problems = []
    if template.uses_gpus and template.gpu.per_task != 1:
        problems.append(Problem(
            "gpu.per_task", template.gpu.per_task,
            f"{target} runs one process per GPU: pods get whole GPUs ({GPU_RESOURCE}) and each process "
            "takes the GPU of its local rank",
            "1, or gpu.per_executor=0 for pods without GPUs"))
    elif processes > pods * slots:
        problems.append(Problem(
            "job.processes", processes,
            f"more processes than the pods' slots ({pods} pods x {slots})", f"at most {pods * slots}"))
    elif even and processes % pods:
        problems.append(Problem(
            "job.processes", processes,
            f"torchrun starts the same number of processes in each of the {pods} pods (executor.instances)",
            f"a multiple of {pods} up to {pods * slots}"))
    if problems:
        raise TemplateError(f"render {template.name!r} for {target}", problems)
    return Workers(pods, processes // pods if even else slots, processes)


def check_names(template: PoolTemplate, target: str, **names: str) -> None:
    """Raise TemplateError unless every name (job_name=..., namespace=...) is a DNS label."""
    problems = [Problem(option, value, "is not a Kubernetes name (an RFC 1035 label)",
                        "lower-case letters, digits and '-', starting with a letter, at most 63 characters")
                for option, value in names.items() if not _DNS_LABEL.fullmatch(value)]
    if problems:
        raise TemplateError(f"render {template.name!r} for {target}", problems)


def metadata(name: str, namespace: str) -> dict[str, str]:
    return {"name": name, "namespace": namespace}


def compact(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields that hold something (an empty env or resources is left out)."""
    return {key: value for key, value in fields.items() if value not in (None, [], {})}


def quantity(memory: str) -> str:
    """A Spark memory string as a Kubernetes quantity: 60g -> 60Gi, 2000m -> 2000Mi."""
    size = parse_size(memory).bytes
    for spark_unit, unit in _QUANTITY_UNITS:
        if size % UNIT_BYTES[spark_unit] == 0:
            return f"{size // UNIT_BYTES[spark_unit]}{unit}"
    return str(size)


def resources(cores: int | None, memory: str | None, gpus: int = 0) -> dict[str, Any]:
    """Requests for the cores and memory, a memory limit, and GPUs (extended resources are limits)."""
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    if cores is not None:
        requests["cpu"] = cores
    if memory is not None:
        requests["memory"] = limits["memory"] = quantity(memory)
    if gpus:
        limits[GPU_RESOURCE] = gpus
    return {key: value for key, value in (("limits", limits), ("requests", requests)) if value}


def executor_resources(template: PoolTemplate) -> dict[str, Any]:
    """What one executor holds, for a pod that takes its place."""
    return resources(template.executor.cores, template.executor.memory, template.gpu.per_executor)


def env(template: PoolTemplate) -> list[dict[str, str]]:
    """The executors' environment (executor.env: NCCL settings and the like)."""
    return [{"name": name, "value": value} for name, value in template.executor.env.items()]


def shm_volume() -> dict[str, Any]:
    # Containers get a 64 MiB /dev/shm; NCCL, DataLoader workers and Open MPI's shared-memory
    # transport need more. A memory-backed emptyDir counts against the pod's memory limit.
    return {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}


def shm_mount() -> dict[str, str]:
    return {"name": SHM_VOLUME, "mountPath": "/dev/shm"}


def mpirun_command(template: PoolTemplate, processes: int, program: list[str]) -> list[str]:
    """mpirun over the operator's hostfile. Ranks on other pods start through sshd with a bare
    environment, so PATH (the image's venv) and the executors' env are passed on with -x."""
    command = ["mpirun", "-np", str(processes), "--bind-to", "none", "--map-by", "slot",
               "--mca", "plm_rsh_args", SSH_CLIENT_ARGS]
    for name in ("PATH", *template.executor.env):
        command += ["-x", name]
    return [*command, *program]


def sshd_readiness_probe() -> dict[str, Any]:
    """Ready once sshd listens, so the launcher's first ssh finds it."""
    return {"tcpSocket": {"port": image_contract.SSHD_PORT}, "initialDelaySeconds": 2, "periodSeconds": 2}


class _Dumper(yaml.SafeDumper):
    """SafeDumper writing a value shared by two places twice, not as a YAML anchor and alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(template: PoolTemplate, needs: str, documents: list[dict[str, Any]], notes: tuple[str, ...] = ()) -> str:
    """The documents as one YAML stream (keys sorted), after a comment naming what applies them and a line for
    each note."""
    header = (f"# Rendered from pool template {template.name}; change the template, not this file.\n"
              f"# Needs {needs}. Apply with: kubectl apply -f FILE\n"
              + "".join(f"# {note}\n" for note in notes))
    # A wide line keeps long arguments (mpirun's ssh options) on one line instead of folded.
    return header + yaml.dump_all(documents, Dumper=_Dumper, sort_keys=True, explicit_start=True, width=1000)
