"""An sbatch script: the template's executors as Slurm nodes, its task slots as tasks, its GPUs as Slurm's (torchx's
SlurmBatchRequest made the same way: the request as data, then the script). Two launches, which the script names:

- `spark` (the default, for every job kind): a Spark pool of the job's own. `trainrun spark-pool` starts a standalone
  master on the first node and a worker on every node through srun, each with the template's cores, memory and GPUs,
  waits until every worker has registered, runs the job on the pool with the template's Spark conf, and stops the
  pool however the job ends. A barrier job is `trainrun spark -np N`, a horovod job a horovod.spark estimator, a
  torch-distributor or plain job a driver script (TorchDistributor) whose SparkSession finds the pool.
- `srun`: no Spark. A horovod, plain or barrier job runs `trainrun mpi` over every task (srun --mpi=pmix); a
  torch-distributor job runs one torchrun per node (`trainrun torch --nnodes`). Under a container runtime, srun
  starts the image on every task itself, with srun's PMIx folder mounted: Pyxis (`--container-image`), Apptainer
  (`apptainer exec --nv`) or Podman (host network, IPC and PID, srun's variables passed in); in the image, Python maps
  Slurm's variables to the ranks'.
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
LAUNCHES = ("spark", "srun")
DEFAULT_TIME = "01:00:00"
DEFAULT_SCRIPT = (f"{image_contract.EXAMPLES_DIR}/horovod_torch_mnist.py", "--checkpoint-dir", "checkpoints")
DEFAULT_TORCH_SCRIPT = (f"{image_contract.EXAMPLES_DIR}/ddp_torch_mnist.py", "--checkpoint-dir", "checkpoints")
# What each job kind runs on the Spark pool when no script is given. The estimator's store and TorchDistributor's
# checkpoints are in the job's folder, which every node sees (a Slurm node's /tmp is its own, and TorchDistributor's
# rank 0 runs in a Spark executor's folder).
TORCH_DISTRIBUTOR_SCRIPT = (f"{image_contract.EXAMPLES_DIR}/torch_distributor_mnist.py", "--checkpoint-dir",
                            '"$PWD/checkpoints"')
SPARK_SCRIPTS = {
    "barrier": DEFAULT_TORCH_SCRIPT,
    "horovod": (f"{image_contract.EXAMPLES_DIR}/horovod_spark_estimator_mnist.py", "--store", '"$PWD/horovod-store"'),
    "torch-distributor": TORCH_DISTRIBUTOR_SCRIPT,
    "plain": TORCH_DISTRIBUTOR_SCRIPT,
}
# The default programs that resume from their checkpoints (trainrun.checkpoint), whose scripts ask to be requeued.
RESUMING_KINDS = ("barrier", "torch-distributor", "plain")
# Spark's memory overhead of an executor (the JVM's off-heap and Python's workers), as YARN and Kubernetes request
# it: 10% of its memory, at least 384 MiB; and the driver's memory where the template gives none.
OVERHEAD_FACTOR, MIN_OVERHEAD_MIB, DEFAULT_DRIVER_MIB = 0.10, 384, 1024
PMIX_MOUNT = '"$PMIX_SERVER_TMPDIR:$PMIX_SERVER_TMPDIR"'
WORK_MOUNT = '"$PWD:$PWD"'
MAX_LINE = 120
# Slurm's --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS.
TIME_FORMATS = "MM, HH:MM:SS or D-HH:MM:SS, e.g. 01:00:00"


@dataclass(frozen=True)
class BatchRequest:
    """What sbatch is asked for, and the one step the script runs."""

    options: list[tuple[str, str | None]]
    env: dict[str, str]
    step: list[str]  # the words of the step's command line; those in double quotes are left to the shell
    launch: str  # what the script says it runs, after "# Launch: "
    preamble: tuple[str, ...] = ()  # shell lines before the step
    submit_from: str = ""  # where to run sbatch, after "Submit with: sbatch FILE"
    requeue: bool = True  # requeued before the time limit: its program resumes from its checkpoints

    def script(self, template: PoolTemplate) -> str:
        lines = ["#!/bin/bash", f"# Rendered from pool template {template.name}; change the template, not this file.",
                 f"# Submit with: sbatch FILE{self.submit_from}", f"# Launch: {self.launch}"]
        lines += [f"#SBATCH --{name}" + (f"={value}" if value is not None else "") for name, value in self.options]
        lines += ["set -euo pipefail", *self.preamble]
        lines += [f"export {name}={shlex.quote(value)}" for name, value in self.env.items()]
        if not self.requeue:
            return "\n".join([*lines, _command_line(self.step)]) + "\n"
        # Requeued 90 s before the time limit (--signal=B:USR1@90 reaches this shell, which waits for the step in
        # the background so that the trap runs at once); the requeued job starts the program again, which resumes
        # from its checkpoints (trainrun.checkpoint; docs/guides/stopped-jobs.md).
        lines += ["trap 'scontrol requeue \"$SLURM_JOB_ID\"' USR1", _command_line(self.step) + " &", 'wait "$!"']
        return "\n".join(lines) + "\n"


def _shell_words(words: list[str]) -> list[str]:
    return [word if word.startswith('"') else shlex.quote(word) for word in words]


def _command_line(words: list[str]) -> str:
    """The step's words as one shell line, or, where that is longer than MAX_LINE, one line per option (`--conf`)
    continued with backslashes."""
    line = " ".join(_shell_words(words))
    if len(line) <= MAX_LINE:
        return line
    pieces: list[list[str]] = [[]]
    for word, quoted in zip(words, _shell_words(words)):
        if word in ("--conf", "--") and pieces[-1]:
            pieces.append([])
        pieces[-1].append(quoted)
    return " \\\n    ".join(" ".join(piece) for piece in pieces)


def _examples_of(runtime: str, words: tuple[str, ...]) -> tuple[str, ...]:
    """The default script in the image's examples folder, or, on the nodes' own Python (no image), in the folder the
    job is submitted from: a checkout's examples/."""
    if runtime != "host":
        return words
    return tuple(word.removeprefix(f"{image_contract.EXAMPLES_DIR}/") for word in words)


def _submit_from(runtime: str, script: str | None) -> str:
    return " in a checkout's examples/ folder, where the default script is" if runtime == "host" and not script else ""


def _check_time(value: str) -> bool:
    days, _, clock = value.rpartition("-")
    parts = clock.split(":")
    return (not days or days.isdigit()) and 1 <= len(parts) <= 3 and all(part.isdigit() for part in parts)


def _memory(memory: str, executors_per_node: int) -> str:
    """The executors' memory on one node as sbatch's --mem (whole MiB; Slurm's units are binary too)."""
    return f"{parse_size(memory).bytes * executors_per_node // UNIT_BYTES['m']}M"


def _pool_memory(template: PoolTemplate, executors_per_node: int) -> str:
    """A Spark pool's node as sbatch's --mem: its executors' memory and overhead, and the driver's (which runs on
    the first node, and Slurm gives every node the same)."""
    executor = parse_size(template.executor.memory).bytes // UNIT_BYTES["m"] if template.executor.memory else 1024
    driver = (parse_size(template.driver.memory).bytes // UNIT_BYTES["m"] if template.driver.memory
              else DEFAULT_DRIVER_MIB)
    overhead = max(MIN_OVERHEAD_MIB, int(executor * OVERHEAD_FACTOR))
    return f"{executors_per_node * (executor + overhead) + driver}M"


def render(template: PoolTemplate, image: str | None = None, registry: str | None = None,
           job_name: str | None = None, script: str | None = None, runtime: str = "host",
           partition: str | None = None, account: str | None = None, time: str = DEFAULT_TIME,
           launch: str = "spark") -> str:
    where = f"render {template.name!r} for slurm"
    problems = []
    if launch not in LAUNCHES:
        problems.append(Problem("launch", launch, "is not a launch this target renders",
                                "spark (a Spark pool of the job's own) or srun (MPI or torchrun ranks)"))
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
    if problems:
        raise TemplateError(where, problems)
    if launch == "spark":
        image_words = [] if runtime == "host" else [
            "--container-runtime", runtime, "--container-image", workload.image_reference(template, image, registry)]
        return _spark_pool_request(template, job_name, script, time, partition, account, runtime,
                                   image_words).script(template)
    return _srun_request(template, image, registry, job_name, script, runtime, partition, account,
                         time).script(template)


def _common_options(template: PoolTemplate, job_name: str | None, time: str, partition: str | None,
                    account: str | None, requeue: bool = True
                    ) -> tuple[list[tuple[str, str | None]], list[tuple[str, str | None]]]:
    """The options every launch's script starts and ends with."""
    head: list[tuple[str, str | None]] = [("job-name", job_name or template.name), ("nodes", str(template.nodes))]
    tail: list[tuple[str, str | None]] = [("time", time)]
    tail += [(name, value) for name, value in (("partition", partition), ("account", account)) if value]
    if requeue:  # Lightning's requeue: SIGUSR1 90 s before the time limit, and the job may be requeued.
        tail += [("signal", "B:USR1@90"), ("requeue", None)]
    tail.append(("output", "%x-%j.out"))
    return head, tail


def _spark_pool_request(template: PoolTemplate, job_name: str | None, script: str | None, time: str,
                        partition: str | None, account: str | None, runtime: str,
                        image_words: list[str]) -> BatchRequest:
    """One worker a node, as the template's executors of that node; the job on the pool as its kind runs; under a
    container runtime, master, workers and job in the image (trainrun on the nodes starts them)."""
    per_node = template.executor.instances // template.nodes
    kind = template.job.kind
    # A script of the user's own is theirs to resume; of the examples, those that checkpoint.
    requeue = script is not None or kind in RESUMING_KINDS
    head, tail = _common_options(template, job_name, time, partition, account, requeue)
    options = [*head, ("ntasks-per-node", "1")]
    if template.executor.cores:
        options.append(("cpus-per-task", str(template.executor.cores * per_node)))
    if template.uses_gpus and not template.gpu.placeholders:
        options.append(("gpus-per-node", str(template.gpu.per_executor * per_node)))
    options += [("mem", _pool_memory(template, per_node)), *tail]
    program = ["python", *workload.script_words(template, "slurm", script, _examples_of(runtime,
                                                                                      SPARK_SCRIPTS[kind]))]
    if kind == "barrier":
        program = ["trainrun", "spark", "-np", str(template.job.processes or template.total_task_slots()), *program]
    pool = ["trainrun", "spark-pool", *image_words,
            *(["--placeholder-gpus"] if template.uses_gpus and template.gpu.placeholders else [])]
    for key, value in template.spark_conf().items():
        pool += ["--conf", f"{key}={value}"]
    where = "" if runtime == "host" else f", in the image under {runtime}"
    launch = (f"spark: a Spark pool of this job's own ({template.nodes} nodes, a worker each{where}), job kind "
              f"{kind}; trainrun spark-pool starts it, runs the job on it and stops it"
              + ("" if requeue else "; not requeued, since the example does not resume from checkpoints"))
    return BatchRequest(options, {}, [*pool, "--", *program], launch, submit_from=_submit_from(runtime, script),
                        requeue=requeue)


def _srun_request(template: PoolTemplate, image: str | None, registry: str | None, job_name: str | None,
                  script: str | None, runtime: str, partition: str | None, account: str | None,
                  time: str) -> BatchRequest:
    where = f"render {template.name!r} for slurm"
    problems = []
    nodes, executors = template.nodes, template.executor.instances
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
    head, tail = _common_options(template, job_name, time, partition, account)
    options = [*head, ("ntasks-per-node", str(1 if torch else tasks_per_node))]
    if cpus_per_task:
        options.append(("cpus-per-task", str(cpus_per_task * tasks_per_node if torch else cpus_per_task)))
    if gpus_per_node:
        options.append(("gpus-per-node", str(gpus_per_node)))
    if template.executor.memory:
        options.append(("mem", _memory(template.executor.memory, per_node)))
    options += tail

    program = ["python", *workload.script_words(template, "slurm", script, _examples_of(
        runtime, DEFAULT_TORCH_SCRIPT if torch else DEFAULT_SCRIPT))]
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
    launch = ("srun: one torchrun per node (trainrun torch), no Spark" if torch
              else "srun: MPI ranks on every task (trainrun mpi), no Spark")
    return BatchRequest(options, dict(template.executor.env), step, launch, preamble, _submit_from(runtime, script))


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
