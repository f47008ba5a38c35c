"""An sbatch script: the template's executors as Slurm nodes, its task slots as tasks, its GPUs as Slurm's (torchx's
SlurmBatchRequest made the same way: the request as data, then the script).

A horovod, plain or barrier job runs `trainrun mpi` over every task (srun --mpi=pmix); a torch-distributor job runs
one torchrun per node (`trainrun torch --nnodes`). Under a container runtime, srun starts the image on every task
itself, with srun's PMIx folder mounted: Pyxis (`--container-image`), Apptainer (`apptainer exec --nv`) or Podman
(host network, IPC and PID, srun's variables passed in); in the image, Python maps Slurm's variables to the ranks'.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from .. import image_contract
from ..errors import Problem, TemplateError
from ..schema import PoolTemplate
from ..units import UNIT_BYTES, parse_size
from . import workload

RUNTIMES = ("host", "pyxis", "apptainer", "podman")
DEFAULT_TIME = "01:00:00"
DEFAULT_SCRIPT = (f"{image_contract.EXAMPLES_DIR}/horovod_torch_mnist.py", "--checkpoint-dir", "checkpoints")
DEFAULT_TORCH_SCRIPT = (f"{image_contract.EXAMPLES_DIR}/ddp_torch_mnist.py", "--checkpoint-dir", "checkpoints")
PMIX_MOUNT = '"$PMIX_SERVER_TMPDIR:$PMIX_SERVER_TMPDIR"'
WORK_MOUNT = '"$PWD:$PWD"'
# Slurm's --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS.
TIME_FORMATS = "MM, HH:MM:SS or D-HH:MM:SS, e.g. 01:00:00"


@dataclass(frozen=True)
class BatchRequest:
    """What sbatch is asked for, and the one step the script runs."""

    options: list[tuple[str, str | None]]
    env: dict[str, str]
    step: list[str]  # the words of the step's command line; those in double quotes are left to the shell
    preamble: tuple[str, ...] = ()  # shell lines before the step

    def script(self, template: PoolTemplate) -> str:
        lines = ["#!/bin/bash", f"# Rendered from pool template {template.name}; change the template, not this file.",
                 "# Submit with: sbatch FILE"]
        lines += [f"#SBATCH --{name}" + (f"={value}" if value is not None else "") for name, value in self.options]
        lines += ["set -euo pipefail", *self.preamble]
        lines += [f"export {name}={shlex.quote(value)}" for name, value in self.env.items()]
        # Requeued 90 s before the time limit (--signal=B:USR1@90 reaches this shell, which waits for the step in
        # the background so that the trap runs at once); the program resumes from its checkpoints.
        lines += ["trap 'scontrol requeue \"$SLURM_JOB_ID\"' USR1", " ".join(_shell_words(self.step)) + " &",
                  'wait "$!"']
        return "\n".join(lines) + "\n"


def _shell_words(words: list[str]) -> list[str]:
    return [word if word.startswith('"') else shlex.quote(word) for word in words]


def _check_time(value: str) -> bool:
    days, _, clock = value.rpartition("-")
    parts = clock.split(":")
    return (not days or days.isdigit()) and 1 <= len(parts) <= 3 and all(part.isdigit() for part in parts)


def _memory(memory: str, executors_per_node: int) -> str:
    """The executors' memory on one node as sbatch's --mem (whole MiB; Slurm's units are binary too)."""
    return f"{parse_size(memory).bytes * executors_per_node // UNIT_BYTES['m']}M"


def render(template: PoolTemplate, image: str | None = None, registry: str | None = None,
           job_name: str | None = None, script: str | None = None, runtime: str = "host",
           partition: str | None = None, account: str | None = None, time: str = DEFAULT_TIME) -> str:
    where = f"render {template.name!r} for slurm"
    problems = []
    if runtime not in RUNTIMES:
        problems.append(Problem("runtime", runtime, "is not a container runtime this target renders",
                                ", ".join(RUNTIMES)))
    if not _check_time(time):
        problems.append(Problem("time", time, "is not a time sbatch reads", TIME_FORMATS))
    nodes, executors = template.nodes, template.executor.instances
    if executors % nodes:
        problems.append(Problem("executor.instances", executors,
                                f"Slurm gives every node the same: {executors} executors do not divide among "
                                f"{nodes} nodes", f"a multiple of nodes ({nodes})"))
    torch = template.job.kind == "torch-distributor"
    slots = executors * template.task_slots_per_executor()
    processes = template.job.processes or slots
    if template.uses_gpus and template.gpu.per_task != 1:
        problems.append(Problem("gpu.per_task", template.gpu.per_task, "Slurm gives each task whole GPUs, one per "
                                "rank here", "1, or gpu.per_executor=0 for nodes without GPUs"))
    elif processes > slots:
        problems.append(Problem("job.processes", processes, f"more processes than the executors' {slots} task "
                                "slots", f"at most {slots}"))
    elif processes % nodes:
        problems.append(Problem("job.processes", processes, f"every node runs the same number of tasks: {processes} "
                                f"do not divide among {nodes} nodes", f"a multiple of {nodes}"))
    if problems:
        raise TemplateError(where, problems)
    per_node = executors // nodes
    tasks_per_node = processes // nodes
    gpus_per_node = template.gpu.per_executor * per_node
    if template.uses_gpus and tasks_per_node > gpus_per_node:
        raise TemplateError(where, [Problem(
            "job.processes", processes, f"{tasks_per_node} tasks per node, each with a GPU of its own, on "
            f"{gpus_per_node} GPUs per node", f"at most {gpus_per_node * nodes}")])
    cores = template.executor.cores
    cpus_per_task = template.executor.task_cpus or (cores * per_node // tasks_per_node if cores else None)
    options: list[tuple[str, str | None]] = [("job-name", job_name or template.name), ("nodes", str(nodes))]
    options.append(("ntasks-per-node", str(1 if torch else tasks_per_node)))
    if cpus_per_task:
        options.append(("cpus-per-task", str(cpus_per_task * tasks_per_node if torch else cpus_per_task)))
    if gpus_per_node:
        options.append(("gpus-per-node", str(gpus_per_node)))
    if template.executor.memory:
        options.append(("mem", _memory(template.executor.memory, per_node)))
    options.append(("time", time))
    options += [(name, value) for name, value in (("partition", partition), ("account", account)) if value]
    # Lightning's requeue: SIGUSR1 90 s before the time limit, and the job may be requeued.
    options += [("signal", "B:USR1@90"), ("requeue", None), ("output", "%x-%j.out")]

    program = ["python", *workload.script_words(template, "slurm", script, DEFAULT_TORCH_SCRIPT if torch
                                           else DEFAULT_SCRIPT)]
    if torch:
        launch = ["trainrun", "torch", "--nnodes", str(nodes), "--nproc-per-node", str(tasks_per_node),
                  *program[1:]]
    else:
        launch = ["trainrun", "mpi", "-np", str(processes), *program]
    if runtime == "host":
        step = launch
    else:
        reference = workload.image_reference(template, image, registry)
        srun = ["srun", "--kill-on-bad-exit=1"]
        srun += ["--ntasks-per-node=1"] if torch else ["--mpi=pmix"]
        inner = ["trainrun", "torch", "--nnodes", str(nodes), "--nproc-per-node", str(tasks_per_node),
                 "--rdzv-endpoint", '"$head_node:29400"', "--rdzv-id", '"$SLURM_JOB_ID"', *program[1:]] \
            if torch else program
        step = [*srun, *_runtime_words(runtime, reference, template.uses_gpus), *inner]
    preamble = ('head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',) \
        if runtime != "host" and torch else ()
    return BatchRequest(options, dict(template.executor.env), step, preamble).script(template)


def enroot_uri(reference: str) -> str:
    """A docker reference as Enroot (and so Pyxis) reads one, `[REGISTRY#]IMAGE[:TAG]`: without the `#`, Enroot
    pulls from Docker Hub. The first part names a registry by docker's rule: it holds a `.` or `:`, or is localhost."""
    first, slash, rest = reference.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return reference


def _runtime_words(runtime: str, image: str, gpus: bool) -> list[str]:
    """What srun runs on every task before the program: Pyxis takes srun options (and mounts srun's PMIx folder
    itself, as Enroot's PMI hook does); Apptainer and Podman run in a shell of the task, where srun's
    PMIX_SERVER_TMPDIR is set (the batch script's shell has none), with it mounted at the same path."""
    if runtime == "pyxis":
        return [f"--container-image={enroot_uri(image)}", "--container-mounts", WORK_MOUNT, "--container-workdir",
                '"$PWD"']
    if runtime == "apptainer":
        container = ["apptainer", "exec", "--nv", "--bind", PMIX_MOUNT, "--bind", WORK_MOUNT, f"docker://{image}"]
    else:
        # As the job's user, who can use srun's PMIx folder: keep-id where Podman is rootless, the job's uid where it
        # runs as root (keep-id is rootless only); with the host's PID namespace the image's tini is not PID 1
        # (TINI_SUBREAPER), and Podman's healthchecks need systemd.
        # GPUs through CDI (the NVIDIA Container Toolkit's nvidia.com/gpu), narrowed to the task's by Slurm's
        # CUDA_VISIBLE_DEVICES, passed in from the task.
        gpu_words = ["--device", "nvidia.com/gpu=all", "--env", "CUDA_VISIBLE_DEVICES"] if gpus else []
        container = ["podman", "run", "--rm", "--network=host", "--ipc=host", "--pid=host", '"$as_user"',
                     "--no-healthcheck", *gpu_words, "--env", "TINI_SUBREAPER=1", "--env", '"SLURM_*"', "--env",
                     '"PMIX_*"', "--volume", PMIX_MOUNT, "--volume", WORK_MOUNT, "--workdir", '"$PWD"', image]
    as_user = ('if [ "$(id -u)" -eq 0 ]; then as_user=--user=0:0; else as_user=--userns=keep-id; fi; '
               if runtime == "podman" else "")
    return ["sh", "-c", as_user + "exec " + " ".join(_shell_words(container)) + ' "$@"', runtime]
