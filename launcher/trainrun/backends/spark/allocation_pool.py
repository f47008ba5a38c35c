"""A Spark standalone pool across the nodes of a Slurm allocation, for the one command it runs: what `trainrun
spark-pool` and, for its barrier stage, `trainrun spark` with no master inside salloc or sbatch start (the plan's argv
runs this module's main).

    python -m trainrun.backends.spark.allocation_pool --nodes n1,n2 --master-port P --worker-cores C
        --worker-memory M [--worker-gpus G --discovery-script S [--placeholder-gpus]] [--conf K=V ...]
        [--container-runtime R --container-image I --workdir D [--as-root] [--gpus]] -- COMMAND...

The master runs on the allocation's first node (where the batch script runs), one worker on every node; each is an
srun step of trainrun.backends.spark.pool_daemon, on the nodes' own Python or in the image under a container runtime
(trainrun.containers). Once every worker has registered, COMMAND runs against the pool (in this shell, or in the image
as a step on the first node): its Spark conf folder (SPARK_CONF_DIR) holds the pool's master and the job's Spark conf,
and MASTER names the master, as spark-submit reads it, so that `spark-submit`, `python train.py` whose SparkSession
sets no master, and a notebook all run on the pool. However COMMAND ends, the pool is stopped: each step is told to
stop (the workers end their executors and remove their work folders), then what is left is ended by pid, and the
conf folder is removed.

A secret made for this job authenticates master, workers, executors and driver (spark.authenticate, RPC encrypted),
in a Spark conf only the job's user can read, in the home folder the nodes share: another user of the nodes cannot
submit to the pool, and the master's REST server and the UIs' kill links are off.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from typing import Mapping, Sequence

from ...containers import ContainerRoute, container_route
from ...engines.slurm import Allocation, home_cache, srun_head
from ...errors import UsageError
from ...image_contract import DISCOVERY_SCRIPT_PATH
from ...ports import pick_free_port
from ...notebook.session import POOL_MASTER_ENV, POOL_TEMPLATE_ENV
from ...proctree import signal_and_wait, terminate
from ...validate import spark_conf_item
from .pool_daemon import STOP_SIGNAL, master_argv, worker_argv
from .pool_secret import security_conf, write_private_conf

MODULE = "trainrun.backends.spark.allocation_pool"
DEFAULT_EXECUTOR_MEMORY = "1g"
REGISTER_SECONDS = 120.0
STOP_SECONDS = 15.0
POOL_LOST = 1  # the exit code of a job whose pool's workers ended under it
CONF_FILE = "spark-defaults.conf"
EXECUTOR_GPUS = "spark.executor.resource.gpu.amount"
EXECUTOR_DISCOVERY_SCRIPT = "spark.executor.resource.gpu.discoveryScript"
# What the pool's containers are given by name (Podman's; the other runtimes pass the environment through).
POOL_ENV = ("SPARK_CONF_DIR", "MASTER", POOL_MASTER_ENV, POOL_TEMPLATE_ENV, "PYTHONUNBUFFERED", "SLURMD_NODENAME")
POOL_TEMPLATE_FILE = "allocation-pool.yaml"


@dataclass(frozen=True)
class AllocationPool:
    """Where the pool's master listens, what each node's worker offers, and the Spark conf its drivers get."""

    nodes: tuple[str, ...]
    master_port: int
    executors_per_node: int
    executor_cores: int
    executor_memory: str
    executor_gpus: int = 0
    discovery_script: str | None = None
    placeholder_gpus: bool = False  # GPU addresses without devices, so that Spark's GPU scheduling runs on CPUs
    conf: tuple[tuple[str, str], ...] = ()
    # The image master, workers and command run in (trainrun.containers), or the nodes' own Python.
    route: ContainerRoute = ContainerRoute("host", None, "/")

    @property
    def master_url(self) -> str:
        return f"spark://{self.nodes[0]}:{self.master_port}"

    @property
    def worker_cores(self) -> int:
        return self.executor_cores * self.executors_per_node

    @property
    def worker_memory(self) -> str:
        return _times(self.executor_memory, self.executors_per_node)

    @property
    def worker_gpus(self) -> int:
        return self.executor_gpus * self.executors_per_node

    def argv(self, python: str, command: Sequence[str]) -> list[str]:
        argv = [python, "-m", MODULE, "--nodes", ",".join(self.nodes), "--master-port", str(self.master_port),
                "--executors-per-node", str(self.executors_per_node), "--executor-cores", str(self.executor_cores),
                "--executor-memory", self.executor_memory]
        if self.executor_gpus:
            argv += ["--executor-gpus", str(self.executor_gpus), "--discovery-script", str(self.discovery_script)]
            argv += ["--placeholder-gpus"] if self.placeholder_gpus else []
        for key, value in self.conf:
            argv += ["--conf", f"{key}={value}"]
        if self.route.runtime != "host":
            argv += ["--container-runtime", self.route.runtime, "--container-image", str(self.route.image),
                     "--workdir", self.route.workdir, *(["--as-root"] if self.route.as_root else []),
                     *(["--gpus"] if self.route.gpus else [])]
        return [*argv, "--", *command]

    def note(self, job_id: str) -> str:
        cores = f"{self.worker_cores} core{'s' if self.worker_cores != 1 else ''}"
        gpus = ""
        if self.worker_gpus:
            kind = "placeholder GPU addresses" if self.placeholder_gpus else "GPUs (those Slurm gave the node)"
            gpus = f", {self.worker_gpus} {kind}"
        image = "" if self.route.runtime == "host" else f", all in {self.route.image} under {self.route.runtime}"
        return (f"inside Slurm job {job_id}: a Spark pool for this job, master {self.master_url}, a worker of {cores}"
                f"{gpus} and {self.worker_memory} on each of {', '.join(self.nodes)} through srun{image}, "
                "authenticated with a secret of the job's own")


def plan_pool(allocation: Allocation, conf: Mapping[str, str], master_port: int, num_processes: int | None = None,
              placeholder_gpus: bool = False, pool_conf: Mapping[str, str] | None = None) -> AllocationPool:
    """The pool for the allocation's nodes: each worker offers the Spark conf's executors of that node
    (spark.executor.instances, .cores, .memory and .resource.gpu.amount), else the CPUs Slurm gave the node (a
    barrier stage of `num_processes`: an even share of its tasks); refused in one line when the stage would not fit or
    the executors ask a node for more GPUs than Slurm gave it. `pool_conf` goes to the pool's drivers."""
    nodes = allocation.nodes
    per_node = math.ceil(int(conf.get("spark.executor.instances", len(nodes))) / len(nodes))
    if conf.get("spark.executor.cores"):
        executor_cores = int(conf["spark.executor.cores"])
    elif num_processes is not None:
        executor_cores = math.ceil(num_processes / len(nodes) / per_node)
    else:
        executor_cores = max(1, (allocation.cpus_on_node or 1) // per_node)
    cores = executor_cores * per_node
    if num_processes is not None and cores * len(nodes) < num_processes:
        raise UsageError("--num-processes", num_processes, f"is more than the {cores * len(nodes)} task slots of a "
                         f"pool of {len(nodes)} workers of {cores} cores in Slurm job {allocation.job_id}",
                         valid=f"at most {cores * len(nodes)}, or a template with more executor cores")
    executor_gpus = math.ceil(float(conf.get(EXECUTOR_GPUS, "0")))
    gpus = executor_gpus * per_node
    if gpus and not placeholder_gpus and gpus > allocation.gpus_on_node:
        raise UsageError(EXECUTOR_GPUS, conf[EXECUTOR_GPUS], f"asks each node for {gpus} GPU(s) ({per_node} executor(s) "
                         f"a node), and Slurm gave job {allocation.job_id} {allocation.gpus_on_node} on "
                         f"{nodes[0]}", valid=f"at most {allocation.gpus_on_node // per_node} a executor, or an "
                         f"allocation with --gpus-per-node={gpus}")
    script = conf.get(EXECUTOR_DISCOVERY_SCRIPT)
    if gpus and not script:
        raise UsageError(EXECUTOR_DISCOVERY_SCRIPT, "", "is needed for the workers to report their GPUs",
                         valid=f"the path of a GPU discovery script on every node, e.g. the images' "
                               f"{DISCOVERY_SCRIPT_PATH}")
    memory = conf.get("spark.executor.memory", DEFAULT_EXECUTOR_MEMORY)
    return AllocationPool(nodes, master_port, per_node, executor_cores, memory, executor_gpus,
                          script if gpus else None, placeholder_gpus and bool(gpus), tuple((pool_conf or {}).items()))


def _times(memory: str, count: int) -> str:
    """`2g` x 2 = `4g`: Spark's size with its unit kept (a worker's --memory takes the same)."""
    digits = memory.rstrip("bBkKmMgGtT")
    return f"{int(digits) * count}{memory[len(digits):]}" if digits.isdigit() else memory


def write_conf(pool: AllocationPool, parent: str, job_id: str) -> str:
    """A new private folder (0700) under `parent`, in the home folder every node sees, with the pool's Spark conf
    (0600): its master, its drivers' conf and its secret, never on a command line or in the environment; and the pool
    as a pool template (POOL_TEMPLATE_FILE), which a notebook's `%%configure` sizes its session within. Returns the
    folder (SPARK_CONF_DIR)."""
    os.makedirs(parent, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="spark-pool-", dir=parent)
    write_private_conf(os.path.join(folder, CONF_FILE),
                       {**dict(pool.conf), "spark.master": pool.master_url, **security_conf(secrets.token_hex(32))})
    with open(os.path.join(folder, POOL_TEMPLATE_FILE), "w", encoding="utf-8") as template:
        json.dump(pool_template_data(pool, job_id), template, indent=2)  # JSON is YAML
    return folder


def pool_template_data(pool: AllocationPool, job_id: str) -> dict:
    """The pool as the data of a pool template (pooltemplates): its nodes and executors, and its GPUs."""
    data: dict = {"description": f"The Spark pool of Slurm job {job_id}, master {pool.master_url}.",
                  "nodes": len(pool.nodes),
                  "executor": {"instances": pool.executors_per_node * len(pool.nodes),
                               "cores": pool.executor_cores, "memory": pool.executor_memory}}
    if pool.executor_gpus:
        data["gpu"] = {"per_executor": pool.executor_gpus, "discovery_script": pool.discovery_script,
                       "placeholders": pool.placeholder_gpus}
    return data


def alive_workers(host: str, ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://{host}:{ui_port}/json/", timeout=2) as response:
            return int(json.load(response).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


def run_pool(pool: AllocationPool, command: Sequence[str], conf_parent: str) -> int:
    """Starts the pool, runs `command` against it, stops the pool; the command's exit code. Master and workers are
    srun steps (so that a container runtime can start them, Pyxis through srun's own options); the master's UI, which
    says when every worker has registered, is on a free port of the first node. The command runs in this shell, or
    under a container runtime as a step on the first node."""
    ui_port = pick_free_port()
    conf_dir = write_conf(pool, conf_parent, os.environ.get("SLURM_JOB_ID", ""))
    env = {**os.environ, "SPARK_CONF_DIR": conf_dir, "MASTER": pool.master_url, POOL_MASTER_ENV: pool.master_url,
           POOL_TEMPLATE_ENV: os.path.join(conf_dir, POOL_TEMPLATE_FILE)}
    route = pool.route
    python = route.python(sys.executable)
    first = srun_head(1, 1, None, label=False, nodelist=pool.nodes[0], overlap=True)
    started: dict[str, subprocess.Popen] = {}
    try:
        started["the master"] = subprocess.Popen(
            [*first, *route.srun_options(), *route.prefix(),
             *master_argv(python, pool.nodes[0], pool.master_port, ui_port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # One srun step, so that ending srun ends every worker; --gpus-per-node narrows each node's
        # CUDA_VISIBLE_DEVICES to the GPUs its worker offers.
        gpus = [f"--gpus-per-node={pool.worker_gpus}"] if pool.worker_gpus and not pool.placeholder_gpus else []
        started["the workers' srun"] = subprocess.Popen(
            [*srun_head(len(pool.nodes), len(pool.nodes), 1, label=False, overlap=True), *gpus,
             *route.srun_options(), *route.prefix(),
             *worker_argv(python, pool.worker_cores, pool.worker_memory, pool.master_url, pool.worker_gpus,
                          pool.discovery_script, pool.placeholder_gpus)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        _wait_for_workers(pool, ui_port, started)
        print(f"trainrun: Spark pool {pool.master_url}: {len(pool.nodes)} workers registered", file=sys.stderr,
              flush=True)
        job = list(command) if route.runtime == "host" else [*first, *route.srun_options(), *route.prefix(),
                                                               *command]
        started["the job"] = subprocess.Popen(job, env=env)
        return _wait_for_job(started["the job"], started["the workers' srun"])
    finally:
        # Not cut short by the next SIGTERM (Slurm's and trainrun's both come at a time limit or scancel); the secret
        # first, since a SIGKILL (KillWait after Slurm's SIGTERM) may still cut the rest short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        shutil.rmtree(conf_dir, ignore_errors=True)
        # srun forwards SIGUSR2 to each step's tasks (and a container runtime to the container): each daemon
        # (pool_daemon) stops what it started, a worker removes its folder and says what ran. A SIGTERM would make
        # srun kill the step at once, and a container runtime's process with it, leaving the container behind.
        signal_and_wait([process for name, process in started.items() if name != "the job" or route.runtime != "host"],
                        STOP_SIGNAL, STOP_SECONDS)
        terminate([process.pid for process in reversed(started.values()) if process.poll() is None], STOP_SECONDS)
        if "the workers' srun" in started:
            _report_executors(started["the workers' srun"])


def _wait_for_job(job: subprocess.Popen, workers: subprocess.Popen) -> int:
    """The job's exit code; POOL_LOST where the workers' srun ends first (a node lost, a worker killed: srun's
    --kill-on-bad-exit ends the others), since the job's pool is then gone."""
    while True:
        try:
            return job.wait(timeout=1)
        except subprocess.TimeoutExpired:
            if workers.poll() is not None:
                print(f"trainrun: the Spark pool's workers ended while the job ran (srun exited with code "
                      f"{workers.returncode}: a node lost or a worker killed); the job is stopped", file=sys.stderr,
                      flush=True)
                return POOL_LOST


def _report_executors(workers: subprocess.Popen) -> None:
    """Each worker's last line: the node and the executors it ran, in one line of the pool's."""
    lines = [line.strip() for line in workers.stdout or () if line.startswith("executors on ")]
    if lines:
        print(f"trainrun: Spark pool stopped; {'; '.join(sorted(lines))}", file=sys.stderr, flush=True)


def _wait_for_workers(pool: AllocationPool, ui_port: int, started: Mapping[str, subprocess.Popen]) -> None:
    deadline = time.monotonic() + REGISTER_SECONDS
    while alive_workers(pool.nodes[0], ui_port) < len(pool.nodes):
        ended = [f"{name} exited with code {process.returncode}" for name, process in started.items()
                 if process.poll() is not None]
        if ended or time.monotonic() > deadline:
            why = ended[0] if ended else f"not every worker registered within {REGISTER_SECONDS:g} s"
            raise SystemExit(f"trainrun: the Spark pool on {', '.join(pool.nodes)} did not start: {why}")
        time.sleep(0.5)


def _terminated(signum: int, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("--nodes", required=True)
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("--executors-per-node", type=int, required=True)
    parser.add_argument("--executor-cores", type=int, required=True)
    parser.add_argument("--executor-memory", required=True)
    parser.add_argument("--executor-gpus", type=int, default=0)
    parser.add_argument("--discovery-script")
    parser.add_argument("--placeholder-gpus", action="store_true")
    parser.add_argument("--conf", action="append", default=[], type=lambda item: spark_conf_item("--conf", item))
    parser.add_argument("--container-runtime")
    parser.add_argument("--container-image")
    parser.add_argument("--workdir", default=os.getcwd())
    parser.add_argument("--as-root", action="store_true")
    parser.add_argument("--gpus", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    conf_parent = home_cache(os.environ)
    route = pool_route(args.container_runtime, args.container_image, args.workdir, conf_parent, args.as_root,
                       args.gpus)
    pool = AllocationPool(tuple(args.nodes.split(",")), args.master_port, args.executors_per_node,
                          args.executor_cores, args.executor_memory, args.executor_gpus, args.discovery_script,
                          args.placeholder_gpus, tuple(args.conf), route)
    signal.signal(signal.SIGTERM, _terminated)
    return run_pool(pool, command, conf_parent)


def pool_route(runtime: str | None, image: str | None, workdir: str, conf_parent: str, as_root: bool,
               gpus: bool) -> ContainerRoute:
    """The container master, workers and command run in: the job's folder and the pool's conf folder mounted,
    its variables passed in; checked as trainrun mpi's are (trainrun.containers)."""
    return container_route(runtime, image, workdir=workdir, folders=(conf_parent,), env=POOL_ENV, pmix=False,
                           as_root=as_root, gpus=gpus)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
