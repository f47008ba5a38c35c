"""The Slurm engine in one module: its facts (the rank environment of a task `srun` started, step_rank_env; the
allocation a shell of `salloc` or `sbatch` runs in, allocation, with its nodes, tasks, CPUs and GPUs), its placement
(the srun line of a step, whether a step fits the allocation, where the ranks' status records go) and its doctor checks
(slurm_checks). Each is read from what Slurm sets, with its host lists expanded here (no `scontrol`, which a container
may lack: each node then became a world of one, pith-train PR #91).

A task is in a step when srun started it: srun sets SLURM_STEP_NUM_TASKS for every task, and neither the batch
script's shell nor salloc's has it (both have SLURM_NTASKS, the batch shell SLURM_PROCID=0 as well). Lightning's
SLURMEnvironment draws the same line, by the job's name; a single `python` in the batch script, mapped as a rank of
4, would wait for three ranks that never come.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping

from ..checks import Check, Facts
from ..errors import UsageError

STEP_TASKS = "SLURM_STEP_NUM_TASKS"
# Ranks whose world another launcher made, inside a Slurm job: mpirun's (its daemons are a step of their own, one task
# per node), horovodrun's Gloo controller's, torchrun's workers' (GROUP_RANK is torchrun's alone).
OTHER_LAUNCHERS = ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "GROUP_RANK")
# MASTER_PORT from the job id as Lightning's SLURMEnvironment makes it, so that Lightning and a DDP script of one job
# meet on one port: 15000 + the id's last four digits.
PORT_BASE = 15000
DEFAULT_MPI = "pmix"  # what Debian's and the images' Open MPI 4.1 speak with srun; pmi2 fails, none starts singletons
# The locked memory InfiniBand (UCX, NCCL's IB transport) registers beyond the few MiB batch shells often get.
MEMLOCK_WANTED = 1 << 30

_RANGE = re.compile(r"(\d+)(?:-(\d+))?$")


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list, as `scontrol show hostnames` expands it: `n[1-3,5],gpu[01-02]` is n1, n2, n3,
    n5, gpu01, gpu02 (leading zeros kept); bracketed ranges may appear more than once in a name (`r[1-2]n[1-2]`)."""
    hosts: list[str] = []
    for name in _split_outside_brackets(text.strip()):
        hosts += _expand_name(name, text)
    return hosts


def _split_outside_brackets(text: str) -> list[str]:
    names, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth not in (0, 1):
            raise ValueError(f"not a Slurm host list: {text!r}")
        if char == "," and depth == 0:
            names.append(text[start:index])
            start = index + 1
    if depth:
        raise ValueError(f"not a Slurm host list: {text!r}")
    names.append(text[start:])
    return [name for name in names if name]


def _expand_name(name: str, whole: str) -> list[str]:
    opening = name.find("[")
    if opening < 0:
        return [name]
    closing = name.index("]", opening)
    prefix, ranges, rest = name[:opening], name[opening + 1:closing], name[closing + 1:]
    expanded = []
    for part in ranges.split(","):
        match = _RANGE.match(part)
        if match is None:
            raise ValueError(f"not a Slurm host list: {whole!r}")
        low, high = match.group(1), match.group(2) or match.group(1)
        width = len(low) if low.startswith("0") else 0
        for number in range(int(low), int(high) + 1):
            expanded += [f"{prefix}{number:0{width}d}{tail}" for tail in _expand_name(rest, whole)]
    return expanded


def expand_tasks_per_node(text: str) -> list[int]:
    """SLURM_TASKS_PER_NODE and SLURM_STEP_TASKS_PER_NODE: `2(x3),1` is 2, 2, 2, 1."""
    counts = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            raise ValueError(f"not a Slurm tasks-per-node list: {text!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def master_port(job_id: str) -> int:
    return PORT_BASE + int(job_id[-4:])


def in_step(environ: Mapping[str, str]) -> bool:
    return STEP_TASKS in environ


def step_rank_env(environ: Mapping[str, str]) -> dict[str, str]:
    """RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR and MASTER_PORT for a task srun started,
    each only where nothing set it (a user's MASTER_PORT, torchrun's RANK are kept); nothing outside a step or where
    another launcher made the world."""
    if not in_step(environ) or any(name in environ for name in OTHER_LAUNCHERS):
        return {}
    node = int(environ.get("SLURM_NODEID", "0"))
    values = {"RANK": environ.get("SLURM_PROCID", environ.get("PMIX_RANK")), "WORLD_SIZE": environ[STEP_TASKS],
              "LOCAL_RANK": environ.get("SLURM_LOCALID"), "NODE_RANK": str(node)}
    tasks_per_node = environ.get("SLURM_STEP_TASKS_PER_NODE", environ.get("SLURM_TASKS_PER_NODE"))
    if tasks_per_node:
        counts = expand_tasks_per_node(tasks_per_node)
        if node < len(counts):
            values["LOCAL_WORLD_SIZE"] = str(counts[node])
    nodes = environ.get("SLURM_STEP_NODELIST", environ.get("SLURM_JOB_NODELIST"))
    if nodes:
        values["MASTER_ADDR"] = expand_hostlist(nodes)[0]
    job_id = environ.get("SLURM_JOB_ID", "")
    if job_id.isdigit():
        values["MASTER_PORT"] = str(master_port(job_id))
    return {name: value for name, value in values.items() if value is not None and name not in environ}


@dataclass(frozen=True)
class Allocation:
    """The job a shell of salloc or sbatch runs in: its nodes, and the tasks it may start on each."""

    job_id: str
    nodes: tuple[str, ...]
    tasks_per_node: tuple[int, ...]  # SLURM_TASKS_PER_NODE: the tasks (or, without --ntasks, CPUs) on each node
    cpus_on_node: int | None = None  # SLURM_CPUS_ON_NODE: the CPUs this (the first) node gives the job
    gpus_on_node: int = 0  # the GPUs this node gives the job (gpus_on_node)

    @property
    def tasks(self) -> int:
        return sum(self.tasks_per_node)


def allocation(environ: Mapping[str, str]) -> Allocation | None:
    """The allocation this shell holds, or None outside one and inside a step (a task srun started launches no
    ranks of its own through srun)."""
    job_id = environ.get("SLURM_JOB_ID")
    nodes = environ.get("SLURM_JOB_NODELIST", environ.get("SLURM_NODELIST"))
    if not job_id or not nodes or in_step(environ):
        return None
    hosts = expand_hostlist(nodes)
    per_node = environ.get("SLURM_TASKS_PER_NODE")
    counts = expand_tasks_per_node(per_node) if per_node else [1] * len(hosts)
    cpus = environ.get("SLURM_CPUS_ON_NODE", "")
    return Allocation(job_id, tuple(hosts), tuple(counts[:len(hosts)]), int(cpus) if cpus.isdigit() else None,
                      gpus_on_node(environ))


def gpus_on_node(environ: Mapping[str, str]) -> int:
    """The GPUs Slurm gave the job on this node: SLURM_GPUS_ON_NODE (Slurm 19.05 and later), else the devices of the
    CUDA_VISIBLE_DEVICES it set, else the count of SLURM_GPUS_PER_NODE (`2` or `a100:2`); 0 without GPUs."""
    on_node = environ.get("SLURM_GPUS_ON_NODE", "")
    if on_node.isdigit():
        return int(on_node)
    visible = environ.get("CUDA_VISIBLE_DEVICES", "")
    if visible and visible != "NoDevFiles":
        return len(visible.split(","))
    per_node = environ.get("SLURM_GPUS_PER_NODE", "").rpartition(":")[2]
    return int(per_node) if per_node.isdigit() else 0


def srun_head(ntasks: int, nodes: int | None, ntasks_per_node: int | None, label: bool, nodelist: str | None = None,
              overlap: bool = False) -> list[str]:
    """srun's options for a step of `ntasks`: --kill-on-bad-exit=1, so that one failed rank ends the step instead of
    leaving the others waiting in a collective (Lightning's guide asks for it), --label for each line's rank, the
    nodes it runs on, and --overlap for a step beside the others on the allocation's CPUs (a Spark pool's daemons
    and job; Slurm 20.11 and later)."""
    argv = ["srun", "--ntasks", str(ntasks)]
    if nodes is not None:
        argv += ["--nodes", str(nodes)]
    if ntasks_per_node is not None:
        argv += ["--ntasks-per-node", str(ntasks_per_node)]
    if nodelist is not None:
        argv += ["--nodelist", nodelist]
    if overlap:
        argv.append("--overlap")
    argv.append("--kill-on-bad-exit=1")
    if label:
        argv.append("--label")
    return argv


def allocation_note(allocation: Allocation, how: str) -> str:
    nodes = ", ".join(f"{node} ({tasks})" for node, tasks in zip(allocation.nodes, allocation.tasks_per_node))
    return f"inside Slurm job {allocation.job_id}, nodes (tasks): {nodes}: {how}"


def home_cache(environ: Mapping[str, str]) -> str:
    """trainrun's folder in the home folder, which a cluster's nodes share (their /tmp is their own): the ranks'
    status records, so that trainrun names the rank that failed on any node, and each Spark pool's conf folder."""
    return os.path.join(environ.get("HOME", os.path.expanduser("~")), ".cache", "trainrun")


def check_fits(job_nodes: int | None, ntasks: int, ntasks_per_node: int | None, allocation: Allocation,
               tasks_option: str, nodes_option: str = "--nodes") -> None:
    """The step fits the allocation, or one line says what does (srun would say `More processors requested than
    permitted` after the launch)."""
    if job_nodes is not None and job_nodes > len(allocation.nodes):
        raise UsageError(nodes_option, job_nodes, f"is more than the {len(allocation.nodes)} nodes of Slurm job "
                         f"{allocation.job_id}", valid=f"1 to {len(allocation.nodes)}")
    if ntasks_per_node is not None:
        nodes = job_nodes or len(allocation.nodes)
        if ntasks > nodes * ntasks_per_node:
            raise UsageError(tasks_option, ntasks, f"is more than --nodes x --ntasks-per-node = {nodes} x "
                             f"{ntasks_per_node}", valid=f"at most {nodes * ntasks_per_node}")
    capacity = sum(allocation.tasks_per_node[:job_nodes]) if job_nodes else allocation.tasks
    if ntasks > capacity:
        raise UsageError(tasks_option, ntasks, f"is more than the {capacity} tasks Slurm job {allocation.job_id} "
                         "may start", valid=f"at most {capacity}, or an allocation with more (salloc/sbatch "
                                            f"--ntasks {ntasks})")


def tasks_on_first_node(ntasks: int, allocation: Allocation, ntasks_per_node: int | None) -> int:
    return min(ntasks, ntasks_per_node or allocation.tasks_per_node[0])


def slurm_checks(facts: Facts) -> list[Check]:
    """Where srun is (a cluster's node or login node) or inside a Slurm job: the MPI plugins srun offers against
    what this Open MPI speaks (PMIx), the locked-memory limit batch shells often get, and a CUDA_VISIBLE_DEVICES that
    srun's --gpus-per-task narrowed below the ranks' local indices."""
    environ = facts.environ
    if facts.srun_mpi_plugins is None and "SLURM_JOB_ID" not in environ:
        return []
    job = environ.get("SLURM_JOB_ID")
    checks = [Check("slurm", "ok", f"inside job {job} on {environ.get('SLURM_JOB_NODELIST', '?')}" if job
                    else "srun is here; not inside a job")]
    plugins = facts.srun_mpi_plugins
    if plugins is not None:
        offered = ", ".join(plugins) or "none"
        if any(plugin.startswith("pmix") for plugin in plugins):
            checks.append(Check("srun-mpi", "ok", f"srun --mpi=list: {offered}; srun --mpi=pmix is what this Open MPI "
                                "speaks"))
        else:
            checks.append(Check("srun-mpi", "fail", f"srun --mpi=list: {offered}, no pmix: Open MPI 4.1 fails in "
                                "MPI_Init under pmi2 and none",
                                "ask the cluster for Slurm's mpi/pmix plugin (and libpmix), or start the ranks "
                                "with mpirun inside the allocation: trainrun mpi -H HOST:SLOTS,..."))
    if job and facts.memlock_bytes is not None and facts.memlock_bytes < MEMLOCK_WANTED:
        checks.append(Check("memlock", "warn", f"ulimit -l is {facts.memlock_bytes // 1024} KiB: InfiniBand (UCX, "
                            "NCCL's IB transport) registers memory beyond it",
                            "PropagateResourceLimitsExcept=MEMLOCK in slurm.conf, or srun --propagate=MEMLOCK "
                            "from a shell with ulimit -l unlimited"))
    checks += spark_pool_checks(facts)
    visible = [d for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    local_rank = environ.get("SLURM_LOCALID", "")
    if in_step(environ) and visible and local_rank.isdigit() and int(local_rank) >= len(visible):
        checks.append(Check("cuda-visible", "warn", f"srun left this task {len(visible)} GPU(s) "
                            f"(CUDA_VISIBLE_DEVICES={','.join(visible)}), so cuda:{local_rank} (its local rank) does "
                            "not exist", "use cuda:0, or LOCAL_RANK % torch.cuda.device_count(); or --gpus-per-node "
                            "instead of --gpus-per-task"))
    return checks


def spark_pool_checks(facts: Facts) -> list[Check]:
    """In the shell of an allocation, the pool `trainrun spark-pool` (and `trainrun spark` without a master) would
    start (trainrun.backends.spark.allocation_pool): where, its GPUs, and what it needs here."""
    held = allocation(facts.environ)
    if held is None:
        return []
    gpus = (f"each worker reports the {held.gpus_on_node} GPU(s) Slurm gave its node (CUDA_VISIBLE_DEVICES)"
            if held.gpus_on_node else "no worker reports GPUs (Slurm gave this job none), placeholders aside")
    where = (f"trainrun spark-pool, and trainrun spark with no --master, start a pool here: its master on "
             f"{held.nodes[0]} (a free port there, the UI on another), a worker on each of "
             f"{', '.join(held.nodes)} through srun; {gpus}")
    missing = [name for name, present in (("PySpark", facts.packages.get("pyspark")), ("Java", facts.java))
               if not present]
    if missing:
        return [Check("spark-pool", "warn", f"{where}, but {' and '.join(missing)} is missing here",
                      "pip install pyspark, and Java 17 (apt-get install openjdk-17-jre-headless)")]
    return [Check("spark-pool", "ok", where)]
