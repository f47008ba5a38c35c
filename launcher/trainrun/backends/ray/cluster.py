"""The process of a `trainrun ray` job: a Ray cluster where the job is, the driver run against it, then the cluster
stopped, however the driver ends (the plan's argv runs this module's main).

    python -m trainrun.backends.ray.cluster local --port P [--num-cpus C] [--num-gpus G] [--no-dashboard] -- DRIVER...
    python -m trainrun.backends.ray.cluster slurm --nodes n1,n2 --port P [...] -- DRIVER...
    python -m trainrun.backends.ray.cluster spark [--max-worker-nodes N] [--no-dashboard] -- DRIVER...

- local: a head node on this host (trainrun.backends.ray.node), with its CPUs and GPUs.
- slurm: inside salloc or sbatch, as Ray's Slurm guide does it: the head on the allocation's first node (where the
  batch script runs) and a worker node on each other node, each an srun step; each node offers what Slurm gave the
  job there.
- spark: Ray on Spark (`ray.util.spark.setup_ray_cluster`) on the Spark master the job names, or on the pool of
  `trainrun spark-pool`, each worker node sized as an executor (trainrun.backends.spark.ray_on_spark, as the images'
  patch of Ray sizes a bare call), with the images' start hook where it is set.

The driver runs with RAY_ADDRESS naming the head, so that its `ray.init()` connects to the cluster: in this shell,
or in Slurm as a step on the head's node.
Every process of the cluster and the driver get token authentication, with a token made for the job
(trainrun.backends.spark.ray_on_spark.authentication_env), in their environments only: no command line, file or log
holds it. The head's dashboard (Ray Train's controller asks its state API) is bound to localhost, except Ray on
Spark's, which Ray binds to every interface of the driver's host, behind the token; `--include-dashboard false`
turns it off.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Sequence

from ...engines.ray import START_HOOK
from ...engines.slurm import srun_head
from ...image_contract import RAY_ON_SPARK_START_HOOK
from ...proctree import signal_and_wait, terminate
from ..spark.ray_on_spark import WorkerNodeSizes, authentication_env, executor_sized
from .layout import CLUSTER_MODULE, RayCluster
from .node import STOP_SECONDS, STOP_SIGNAL, UP_LINE, head_argv, worker_argv

UP_SECONDS = 120.0
CLUSTER_LOST = 1  # the exit code of a driver whose cluster's nodes ended under it
HEAD = "the head"
WORKERS = "the worker nodes' srun"


class _NodesUp:
    """The nodes that say they are up (node.UP_LINE) on the node processes' output, each with its address; their other
    lines are passed on."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        self.addresses: dict[str, str] = {}  # the first node each process started: its address
        self._changed = threading.Condition()

    def follow(self, name: str, process: subprocess.Popen) -> None:
        def read() -> None:
            for line in process.stdout or ():
                if line.startswith(UP_LINE):
                    host, _, address = line[len(UP_LINE):].strip().partition(" ")
                    with self._changed:
                        self.hosts.append(host)
                        self.addresses.setdefault(name, address)
                        self._changed.notify_all()
                else:
                    sys.stdout.write(line)
        threading.Thread(target=read, daemon=True).start()

    def wait(self, count: int, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self.hosts) >= count, timeout)


def run_cluster(cluster: RayCluster, command: Sequence[str]) -> int:
    """Starts the head, then the worker nodes with the head's address as Ray chose it (Ray takes a routable one for
    localhost, and a node's processes know the head by it), runs the driver once every node is up, stops the nodes;
    the driver's exit code."""
    env = {**os.environ, **authentication_env(os.environ)}
    nodes = _NodesUp()
    started: dict[str, subprocess.Popen] = {}
    driver: subprocess.Popen | None = None
    pipes = {"env": env, "stdout": subprocess.PIPE, "text": True}
    python = sys.executable
    on_head = srun_head(1, 1, None, label=False, nodelist=cluster.nodes[0], overlap=True) \
        if cluster.engine == "slurm" else []
    try:
        started[HEAD] = subprocess.Popen(
            [*on_head, *head_argv(python, cluster.port, cluster.num_cpus, cluster.num_gpus, cluster.include_dashboard)],
            **pipes)
        nodes.follow(HEAD, started[HEAD])
        _wait_until_up(cluster, nodes, 1, started)
        head = f"{nodes.addresses[HEAD] or cluster.head_host}:{cluster.port}"
        workers = len(cluster.nodes) - 1
        if workers > 0:
            started[WORKERS] = subprocess.Popen(
                [*srun_head(workers, workers, 1, label=False, overlap=True), "--exclude", cluster.nodes[0],
                 *worker_argv(python, head, cluster.num_cpus, cluster.num_gpus)], **pipes)
            nodes.follow(WORKERS, started[WORKERS])
            _wait_until_up(cluster, nodes, len(cluster.nodes), started)
        print(f"trainrun: Ray cluster {head}: {len(nodes.hosts)} node{'s' if len(nodes.hosts) > 1 else ''} up "
              f"({', '.join(nodes.hosts)})", file=sys.stderr, flush=True)
        # A Ray driver connects through its own node's raylet: in Slurm, a step on the head's node (salloc's shell
        # may run on a login node, and a node's /tmp, where the raylet's socket is, may be the job's own).
        driver = subprocess.Popen([*on_head, *command], env={**env, "RAY_ADDRESS": head})
        return _wait_for_driver(driver, list(started.values()))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if driver is not None and driver.poll() is None:
            terminate([driver.pid], STOP_SECONDS)
        # Each node process stops its `ray start`, which ends Ray's processes on the node.
        signal_and_wait(started.values(), STOP_SIGNAL, STOP_SECONDS)
        terminate([process.pid for process in started.values() if process.poll() is None], STOP_SECONDS)


def _wait_until_up(cluster: RayCluster, nodes: _NodesUp, count: int, started: dict[str, subprocess.Popen]) -> None:
    deadline = time.monotonic() + UP_SECONDS
    while not nodes.wait(count, 0.5):
        ended = [f"{name} exited with code {process.returncode}" for name, process in started.items()
                 if process.poll() is not None]
        if ended or time.monotonic() > deadline:
            why = ended[0] if ended else f"{count - len(nodes.hosts)} of {count} nodes not up within {UP_SECONDS:g} s"
            raise SystemExit(f"trainrun: the Ray cluster on {', '.join(cluster.nodes) or 'this host'} did not start: "
                             f"{why}")


def _wait_for_driver(driver: subprocess.Popen, nodes: list[subprocess.Popen]) -> int:
    """The driver's exit code; CLUSTER_LOST where a node process ends first (a node lost, a worker node killed),
    since the driver's cluster is then gone."""
    while True:
        try:
            return driver.wait(timeout=1)
        except subprocess.TimeoutExpired:
            ended = next((process for process in nodes if process.poll() is not None), None)
            if ended is not None:
                print(f"trainrun: a node of the Ray cluster ended while the driver ran (exit code "
                      f"{ended.returncode}: a node lost or killed); the driver is stopped", file=sys.stderr, flush=True)
                return CLUSTER_LOST


def worker_node_sizes(spark_context, cluster: RayCluster) -> dict[str, int]:
    """setup_ray_cluster's per-worker-node sizes: those given, the rest from one executor (ray_on_spark), so that a
    Ray without the images' patch sizes its nodes the same (Ray takes CPUs and GPUs together or neither)."""
    executor = executor_sized(spark_context, WorkerNodeSizes(None, None, None, None))
    cpus = cluster.num_cpus if cluster.num_cpus is not None else executor.num_cpus
    gpus = cluster.num_gpus if cluster.num_gpus is not None else executor.num_gpus
    sizes = {"memory_worker_node": executor.heap_memory,
             "object_store_memory_worker_node": executor.object_store_memory}
    if cpus is not None and gpus is not None:
        sizes |= {"num_cpus_worker_node": cpus, "num_gpus_worker_node": gpus}
    return {name: value for name, value in sizes.items() if value is not None}


def run_on_spark(cluster: RayCluster, command: Sequence[str]) -> int:
    """Ray on Spark on the session's master (spark.master, MASTER, or SPARK_CONF_DIR's), the driver run against it,
    then the Ray cluster shut down and the session stopped."""
    from pyspark.sql import SparkSession
    from ray.util.spark import MAX_NUM_WORKER_NODES, setup_ray_cluster, shutdown_ray_cluster

    # The images' start hook (its token, interface, drain timeout and shutdown) on any host.
    os.environ.setdefault(START_HOOK, RAY_ON_SPARK_START_HOOK)
    spark = SparkSession.builder.appName("trainrun ray").getOrCreate()
    try:
        address, _ = setup_ray_cluster(
            max_worker_nodes=MAX_NUM_WORKER_NODES if cluster.max_worker_nodes is None else cluster.max_worker_nodes,
            head_node_options={"include_dashboard": cluster.include_dashboard},
            **worker_node_sizes(spark.sparkContext, cluster))
        try:
            print(f"trainrun: Ray on Spark {address} on {spark.sparkContext.master}", file=sys.stderr, flush=True)
            # setup_ray_cluster and the images' start hook put RAY_ADDRESS and the token in this environment.
            return subprocess.call(list(command), env={**os.environ, "RAY_ADDRESS": address})
        finally:
            shutdown_ray_cluster()
    finally:
        spark.stop()


def _terminated(signum: int, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {CLUSTER_MODULE}")
    parser.add_argument("engine", choices=("local", "slurm", "spark"))
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--nodes", default="")
    parser.add_argument("--num-cpus", type=int)
    parser.add_argument("--num-gpus", type=int)
    parser.add_argument("--max-worker-nodes", type=int)
    parser.add_argument("--no-dashboard", action="store_true")
    split = list(argv).index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:split]), list(argv[split + 1:])
    cluster = RayCluster(args.engine, args.port, tuple(filter(None, args.nodes.split(","))), args.num_cpus,
                         args.num_gpus, not args.no_dashboard, args.max_worker_nodes)
    signal.signal(signal.SIGTERM, _terminated)
    return run_on_spark(cluster, command) if cluster.engine == "spark" else run_cluster(cluster, command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
