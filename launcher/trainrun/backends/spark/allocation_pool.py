"""A Spark standalone pool across the nodes of a Slurm allocation, for the one job it runs: what `trainrun spark`
inside salloc or sbatch, with no master of its own, starts (the plan's argv runs this module's main).

    python -m trainrun.backends.spark.allocation_pool --nodes n1,n2 --master-port P --worker-cores C
        --worker-memory M -- DRIVER ARGV...

The master runs on this node (the allocation's first, where the batch script runs), one worker on every node through
one srun step. Once every worker has registered, the driver runs against the pool; however it ends, the pool is
stopped by pid (srun ends the workers and their executors on every node) and its folder removed.

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

from ...errors import UsageError
from ...machine import pick_free_port
from ...proctree import terminate
from ...slurm import Allocation
from .pool_secret import security_conf, write_private_conf

MODULE = "trainrun.backends.spark.allocation_pool"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DEFAULT_WORKER_MEMORY = "1g"
REGISTER_SECONDS = 120.0
STOP_SECONDS = 15.0
CONF_FILE = "spark-defaults.conf"


@dataclass(frozen=True)
class AllocationPool:
    """Where the pool's master listens and what each node's worker offers."""

    nodes: tuple[str, ...]
    master_port: int
    worker_cores: int
    worker_memory: str

    @property
    def master_url(self) -> str:
        return f"spark://{self.nodes[0]}:{self.master_port}"

    def argv(self, python: str, driver: Sequence[str]) -> list[str]:
        return [python, "-m", MODULE, "--nodes", ",".join(self.nodes), "--master-port", str(self.master_port),
                "--worker-cores", str(self.worker_cores), "--worker-memory", self.worker_memory, "--", *driver]

    def note(self, job_id: str) -> str:
        cores = f"{self.worker_cores} core{'s' if self.worker_cores != 1 else ''}"
        return (f"inside Slurm job {job_id}: a Spark pool for this job, master {self.master_url}, a worker of {cores} "
                f"and {self.worker_memory} on each of {', '.join(self.nodes)} through srun, authenticated with a "
                "secret of the job's own")


def plan_pool(allocation: Allocation, num_processes: int, conf: Mapping[str, str], master_port: int,
              use_gpu: bool) -> AllocationPool:
    """The pool a barrier stage of `num_processes` tasks needs on the allocation's nodes: each worker offers the
    template's executors of that node (spark.executor.instances, .cores and .memory), else an even share of the
    tasks; refused in one line when the stage would not fit."""
    if use_gpu:
        raise UsageError("--use-gpu", True, "is not yet given a pool that trainrun starts inside a Slurm allocation",
                         valid="--no-gpu, or --master of a pool whose workers have GPUs")
    nodes = allocation.nodes
    per_node = math.ceil(int(conf.get("spark.executor.instances", len(nodes))) / len(nodes))
    executor_cores = conf.get("spark.executor.cores")
    cores = int(executor_cores) * per_node if executor_cores else math.ceil(num_processes / len(nodes))
    if cores * len(nodes) < num_processes:
        raise UsageError("--num-processes", num_processes, f"is more than the {cores * len(nodes)} task slots of a "
                         f"pool of {len(nodes)} workers of {cores} cores in Slurm job {allocation.job_id}",
                         valid=f"at most {cores * len(nodes)}, or a template with more executor cores")
    memory = conf.get("spark.executor.memory", DEFAULT_WORKER_MEMORY)
    return AllocationPool(nodes, master_port, cores, _times(memory, per_node))


def _times(memory: str, count: int) -> str:
    """`2g` x 2 = `4g`: Spark's size with its unit kept (a worker's --memory takes the same)."""
    digits = memory.rstrip("bBkKmMgGtT")
    return f"{int(digits) * count}{memory[len(digits):]}" if digits.isdigit() else memory


def write_conf(pool: AllocationPool, parent: str) -> str:
    """A new private folder (0700) under `parent`, in the home folder every node sees, with the pool's Spark conf
    (0600): its secret, never on a command line or in the environment. Returns the folder (SPARK_CONF_DIR)."""
    os.makedirs(parent, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="spark-pool-", dir=parent)
    write_private_conf(os.path.join(folder, CONF_FILE),
                       {"spark.master": pool.master_url, **security_conf(secrets.token_hex(32))})
    return folder


def alive_workers(host: str, ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://{host}:{ui_port}/json/", timeout=2) as response:
            return int(json.load(response).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


def run_pool(pool: AllocationPool, driver: Sequence[str], conf_parent: str) -> int:
    """Starts the pool, runs the driver against it, stops the pool; the driver's exit code. The master's UI, which
    says when every worker has registered, is on a free port of this node."""
    ui_port = pick_free_port()
    spark_class = os.path.join(os.environ.get("SPARK_HOME", ""), "bin", "spark-class")
    conf_dir = write_conf(pool, conf_parent)
    env = {**os.environ, "SPARK_CONF_DIR": conf_dir}
    started: dict[str, subprocess.Popen] = {}
    try:
        started["the master"] = subprocess.Popen(
            [spark_class, MASTER_CLASS, "--host", pool.nodes[0], "--port", str(pool.master_port), "--webui-port",
             str(ui_port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # One srun step, so that ending srun ends every worker; each worker's work folder on its node's own disk.
        started["the workers' srun"] = subprocess.Popen(
            ["srun", "--nodes", str(len(pool.nodes)), "--ntasks", str(len(pool.nodes)), "--ntasks-per-node", "1",
             "--kill-on-bad-exit=1", spark_class, WORKER_CLASS, "--cores", str(pool.worker_cores), "--memory",
             pool.worker_memory, "--work-dir", os.path.join(tempfile.gettempdir(), f"spark-work-{os.getpid()}"),
             pool.master_url], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for_workers(pool, ui_port, started)
        print(f"trainrun: Spark pool {pool.master_url}: {len(pool.nodes)} workers registered", file=sys.stderr,
              flush=True)
        started["the driver"] = subprocess.Popen(list(driver), env=env)
        return started["the driver"].wait()
    finally:
        # Not cut short by the next SIGTERM (Slurm's and trainrun's both come at a time limit or scancel); the secret
        # first, since a SIGKILL (KillWait after Slurm's SIGTERM) may still cut the rest short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        shutil.rmtree(conf_dir, ignore_errors=True)
        # SIGTERM (srun passes it to every worker), then SIGKILL after STOP_SECONDS.
        terminate([process.pid for process in reversed(started.values()) if process.poll() is None], STOP_SECONDS)


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
    parser.add_argument("--worker-cores", type=int, required=True)
    parser.add_argument("--worker-memory", required=True)
    parser.add_argument("driver", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    driver = args.driver[1:] if args.driver[:1] == ["--"] else args.driver
    pool = AllocationPool(tuple(args.nodes.split(",")), args.master_port, args.worker_cores, args.worker_memory)
    signal.signal(signal.SIGTERM, _terminated)
    conf_parent = os.path.join(os.path.expanduser("~"), ".cache", "trainrun")
    return run_pool(pool, driver, conf_parent)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
