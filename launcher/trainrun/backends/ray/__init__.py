"""`trainrun ray`: a Ray cluster where the job is, for one driver that runs against it (RAY_ADDRESS), then stopped:

    trainrun ray [--num-cpus N] [--num-gpus N] [--include-dashboard false] -- python driver.py ARGS
    trainrun ray --master spark://HOST:7077 [--max-worker-nodes N] -- python driver.py ARGS

Where it starts the cluster (trainrun.backends.ray.cluster): with --master, or inside `trainrun spark-pool`'s
command, Ray on Spark on that master; in the shell of salloc or sbatch, a head on the first node and a worker node on
each other through srun, as Ray's Slurm guide does it; elsewhere a head node on this host.
"""
from __future__ import annotations

import argparse
from typing import Any

from ...arguments import add_job_options, add_option, non_negative, positive
from ...engines import current
from ...errors import MissingBackend, UsageError
from ...job import RayJob
from ...machine import Machine
from ...notebook.session import POOL_MASTER_ENV
from ...plan import Plan, RunOptions, run_env
from ...program import program_from_command
from .layout import RayCluster

INSTALL_RAY = "pip install 'ray[default,train]' (the images have it)"


class RayPlanner:
    def plan(self, job: RayJob, machine: Machine) -> Plan:
        if not machine.has_ray:
            raise MissingBackend("ray", INSTALL_RAY)
        master = job.master or machine.environ.get(POOL_MASTER_ENV)
        if master is None and job.max_worker_nodes is not None:
            raise UsageError("--max-worker-nodes", job.max_worker_nodes, "sizes Ray on Spark, and this job has no "
                             "Spark master", valid="together with --master URL, or inside trainrun spark-pool")
        if master is not None:
            if not master.startswith(("spark://", "local-cluster[", "local[", "yarn")):
                raise UsageError("--master", master, "is not a master Ray on Spark runs on (Ray refuses k8s://: on "
                                 "Kubernetes, KubeRay)", valid="spark://HOST:PORT, local-cluster[N,C,M], local[N] "
                                                               "or yarn")
            if not machine.has_pyspark:
                raise MissingBackend("pyspark", "pip install pyspark")
            cluster = RayCluster("spark", num_cpus=job.num_cpus, num_gpus=job.num_gpus,
                                 include_dashboard=job.include_dashboard, max_worker_nodes=job.max_worker_nodes)
            env = {**run_env(job.run), "MASTER": master}
            return self._plan(job, machine, cluster, env, f"on the Spark master {master}", "ray (Ray on Spark)")
        if current(machine.environ).engine == "slurm-step":
            raise UsageError("trainrun ray", " ".join(job.command), "runs in a task srun started, which starts no "
                             "cluster of its own", valid="trainrun ray in the batch script or the salloc shell itself")
        if machine.slurm is not None:
            nodes = machine.slurm.nodes
            cluster = RayCluster("slurm", machine.free_port, nodes, job.num_cpus, job.num_gpus,
                                 job.include_dashboard)
            return self._plan(job, machine, cluster, run_env(job.run), f"inside Slurm job {machine.slurm.job_id}",
                              f"ray (Slurm, {len(nodes)} node{'s' if len(nodes) > 1 else ''})")
        cluster = RayCluster("local", machine.free_port, (), job.num_cpus, job.num_gpus, job.include_dashboard)
        return self._plan(job, machine, cluster, run_env(job.run), "on this host", "ray (this host)")

    @staticmethod
    def _plan(job: RayJob, machine: Machine, cluster: RayCluster, env: dict[str, str], where: str,
              backend: str) -> Plan:
        return Plan(backend=backend, argv=cluster.argv(machine.python, job.command), env=env, launcher="the Ray job",
                    local_ranks=1, master=job.master or env.get("MASTER"), notes=(cluster.note(where),), run=job.run)


def include_dashboard(text: str) -> bool:
    """ray start's --include-dashboard value: true or false, in any case."""
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def add_parser(sub: Any) -> None:
    """`trainrun ray` in trainrun's subcommands (trainrun.arguments.build_parser)."""
    ray = sub.add_parser("ray", usage="trainrun ray [--num-cpus N] [--num-gpus N] [--master URL] -- python driver.py",
                         help="a Ray cluster where the job is (this host, salloc/sbatch, a Spark pool) for one driver",
                         description="Starts a Ray cluster where the job is: a head node on this host; inside "
                                     "salloc or sbatch, a head on the first node and a worker node on each other "
                                     "through srun; with --master (or inside trainrun spark-pool), Ray on Spark. "
                                     "Runs the driver with RAY_ADDRESS naming the head, then stops the cluster. "
                                     "Token authentication with a token made for the job; the dashboard on "
                                     "localhost.")
    add_option(ray, "--num-cpus", type=non_negative, metavar="N",
               help="CPUs each node offers Ray (default: what the node gives the job)")
    add_option(ray, "--num-gpus", type=non_negative, metavar="N",
               help="GPUs each node offers Ray (default: the node's visible GPUs)")
    add_option(ray, "--include-dashboard", type=include_dashboard, nargs="?", const=True, default=True,
               metavar="true|false", help="Ray's dashboard on the head, bound to localhost, behind the job's token "
                                          "(default true: Ray Train asks its state API)")
    spark = ray.add_argument_group("Ray on Spark", "Ray's worker nodes in Spark executors "
                                   "(ray.util.spark.setup_ray_cluster), sized as the executors.")
    spark.add_argument("--master", metavar="URL",
                       help="the Spark master: spark://HOST:PORT, local-cluster[N,C,M] (default: the pool of "
                            "trainrun spark-pool around this command, if any)")
    add_option(spark, "--max-worker-nodes", type=positive, metavar="N",
               help="Ray worker nodes at most (default: one in each executor slot)")
    add_job_options(ray, "a driver, e.g. python driver.py, whose ray.init() connects to the cluster")
    ray.set_defaults(make_job=job_from_args)


def job_from_args(args: argparse.Namespace, command: list[str], run: RunOptions) -> RayJob:
    """The job `trainrun ray`'s options describe (trainrun.arguments.job_from_args)."""
    return RayJob(command=tuple(command), program=program_from_command("command", command), num_cpus=args.num_cpus,
                  num_gpus=args.num_gpus, include_dashboard=args.include_dashboard, master=args.master,
                  max_worker_nodes=args.max_worker_nodes, run=run)
