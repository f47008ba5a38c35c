"""One Spark daemon of a pool inside a Slurm allocation, as the pool's srun steps run it, on the node's own Python or
in the image (the same under every container runtime):

    python -m trainrun.backends.spark.pool_daemon master --host H --port P --webui-port U
    python -m trainrun.backends.spark.pool_daemon worker --cores C --memory M [--gpus G --discovery-script S
        [--placeholder-gpus]] MASTER_URL

It runs `spark-class ...Master` or `...Worker` (a worker with a work folder of its own on the node's disk), and when
the pool stops (SIGUSR2, which srun forwards to its tasks and a container runtime to the container) or Slurm ends the
step (SIGTERM: scancel, the time limit) it ends the daemon and what it started (a worker's executors) by pid; a worker
then removes its folder and writes one line naming the node and the executors it ran (`executors on n2:
app-.../0`), which the pool reports.

GPUs: a worker offers G GPUs, which the discovery script reports: the devices Slurm left the node's step
(CUDA_VISIBLE_DEVICES, as indices into it, which is how PySpark's distributors read a task's addresses), or, with
--placeholder-gpus, addresses distinct across the nodes (node i: i*G .. i*G+G-1) for a pool without GPU hardware.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Sequence

from ...proctree import descendants, terminate

MODULE = "trainrun.backends.spark.pool_daemon"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
PLACEHOLDER_ADDRESSES = "TRAINSTACK_GPU_ADDRESSES"  # read by the images' discover-gpus.sh
# A Spark worker's GPUs as Ray on Spark counts them, which it does with nvidia-smi unless this is set: a worker of
# placeholder GPUs would count none and refuse every Ray worker node that asks for one.
RAY_WORKER_GPUS = "RAY_ON_SPARK_WORKER_GPU_NUM"
STOP_SECONDS = 10.0
STOP_SIGNAL = signal.SIGUSR2


def master_argv(python: str, host: str, port: int, ui_port: int) -> list[str]:
    """The command of the pool's master step."""
    return [python, "-m", MODULE, "master", "--host", host, "--port", str(port), "--webui-port", str(ui_port)]


def worker_argv(python: str, cores: int, memory: str, master_url: str, gpus: int = 0,
                discovery_script: str | None = None, placeholder_gpus: bool = False) -> list[str]:
    """The command the pool's worker step runs on every node."""
    argv = [python, "-m", MODULE, "worker", "--cores", str(cores), "--memory", memory]
    if gpus:
        argv += ["--gpus", str(gpus), "--discovery-script", str(discovery_script)]
        argv += ["--placeholder-gpus"] if placeholder_gpus else []
    return [*argv, master_url]


def spark_class() -> str:
    """SPARK_HOME's spark-class where it is set (the node's own Python: trainrun's plan sets it), else the one on PATH
    (the images', whose pyspark finds its home)."""
    home = os.environ.get("SPARK_HOME")
    return os.path.join(home, "bin", "spark-class") if home else "spark-class"


def gpu_env(gpus: int, node_index: int, placeholder: bool) -> dict[str, str]:
    """What a worker of `gpus` placeholder GPUs needs in its environment: the addresses the discovery script
    reports (distinct across workers, so every task of a job sees its own) and the count Ray on Spark reads; none
    for real GPUs (the script then reports the devices of CUDA_VISIBLE_DEVICES)."""
    if not gpus or not placeholder:
        return {}
    return {PLACEHOLDER_ADDRESSES: ",".join(str(node_index * gpus + offset) for offset in range(gpus)),
            RAY_WORKER_GPUS: str(gpus)}


def worker_opts(gpus: int, discovery_script: str | None) -> str:
    if not gpus:
        return ""
    return (f"-Dspark.worker.resource.gpu.amount={gpus} "
            f"-Dspark.worker.resource.gpu.discoveryScript={discovery_script}")


def executors_ran(work_dir: str) -> list[str]:
    """`app-ID/EXECUTOR` for each executor a worker started (its folders in the work folder)."""
    try:
        return sorted(f"{app}/{executor}" for app in os.listdir(work_dir)
                      for executor in os.listdir(os.path.join(work_dir, app)))
    except OSError:
        return []


def _stopped(signum: int, frame) -> None:
    raise SystemExit(128 + signum)


def run_daemon(argv: Sequence[str], env: dict[str, str]) -> int:
    """Runs a Spark daemon until it exits or the pool stops it; then it and what it started are ended by pid."""
    for stop in (signal.SIGTERM, STOP_SIGNAL):
        signal.signal(stop, _stopped)
    daemon = None
    try:
        daemon = subprocess.Popen(list(argv), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return daemon.wait()
    finally:
        for stop in (signal.SIGTERM, STOP_SIGNAL):
            signal.signal(stop, signal.SIG_IGN)
        if daemon is not None:
            terminate([*descendants(daemon.pid), daemon.pid], STOP_SECONDS)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    roles = parser.add_subparsers(dest="role", required=True)
    master = roles.add_parser("master")
    master.add_argument("--host", required=True)
    master.add_argument("--port", type=int, required=True)
    master.add_argument("--webui-port", type=int, required=True)
    worker = roles.add_parser("worker")
    worker.add_argument("--cores", type=int, required=True)
    worker.add_argument("--memory", required=True)
    worker.add_argument("--gpus", type=int, default=0)
    worker.add_argument("--discovery-script")
    worker.add_argument("--placeholder-gpus", action="store_true")
    worker.add_argument("master_url")
    args = parser.parse_args(argv)
    if args.role == "master":
        return run_daemon([spark_class(), MASTER_CLASS, "--host", args.host, "--port", str(args.port),
                           "--webui-port", str(args.webui_port)], dict(os.environ))
    node = os.environ.get("SLURMD_NODENAME", os.uname().nodename)
    work_dir = tempfile.mkdtemp(prefix=f"spark-worker-{os.environ.get('SLURM_JOB_ID', 'job')}-")
    env = {**os.environ, **gpu_env(args.gpus, int(os.environ.get("SLURM_NODEID", "0")), args.placeholder_gpus)}
    opts = " ".join(filter(None, [env.get("SPARK_WORKER_OPTS"), worker_opts(args.gpus, args.discovery_script)]))
    if opts:
        env["SPARK_WORKER_OPTS"] = opts
    try:
        return run_daemon([spark_class(), WORKER_CLASS, "--cores", str(args.cores), "--memory", args.memory,
                           "--work-dir", work_dir, args.master_url], env)
    finally:
        ran = executors_ran(work_dir)
        shutil.rmtree(work_dir, ignore_errors=True)
        print(f"executors on {node}: {', '.join(ran) or 'none'}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
