"""`trainrun spark-pool`: inside salloc or sbatch, a Spark standalone pool across the allocation's nodes for one
command, which runs on it as it would on any cluster's Spark (`spark-submit train.py`, `python train.py` whose
SparkSession names no master, `jupyter lab`), then the pool stops (trainrun.backends.spark.allocation_pool).

    trainrun spark-pool [--template NAME [--set KEY=VALUE]] [--conf KEY=VALUE] [--placeholder-gpus]
        [--container-runtime R --container-image IMAGE] -- COMMAND ARGS

The template's executors size each node's worker (cores, memory, GPUs) and its Spark conf reaches every driver of
the pool through SPARK_CONF_DIR, with the pool's master and secret.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from ...arguments import add_container_options, add_job_options, add_option
from ...errors import MissingBackend, UsageError
from ...job import SparkPoolJob
from ...engines.slurm import home_cache
from ...machine import Machine
from ...plan import Plan, RunOptions, run_env
from ...validate import key_value, spark_conf_item
from . import DEFAULT_CONF, INSTALL_TEMPLATES, add_conf_options, check_spark_here, host_spark_env
from .allocation_pool import EXECUTOR_DISCOVERY_SCRIPT, plan_pool, pool_route

OUTSIDE_ALLOCATION = ("a shell of salloc or sbatch, where srun starts the workers; on one machine: invoke pool.up "
                      "(a pool of containers) or trainrun spark --master local[N]")


def template_of(name: str, overrides: dict[str, str]) -> Any:
    try:
        import pooltemplates
    except ImportError:
        raise MissingBackend("pooltemplates", INSTALL_TEMPLATES) from None
    try:
        return pooltemplates.load_template(name, overrides)
    except pooltemplates.TemplateError as err:
        raise UsageError("--template", name, valid=f"a template that loads: {err}") from None


def discovery_script_here(path: str) -> str:
    """The template's GPU discovery script, else, where this host's Python runs the pool without the image (whose
    script it names), the copy pooltemplates ships: the same script."""
    if os.access(path, os.X_OK):
        return path
    try:
        from pooltemplates import package_file
        from pooltemplates.loading import DISCOVERY_SCRIPT

        return str(package_file(DISCOVERY_SCRIPT))
    except (ImportError, FileNotFoundError):
        return path


class SparkPoolPlanner:
    def plan(self, job: SparkPoolJob, machine: Machine) -> Plan:
        if machine.slurm is None:
            raise UsageError("trainrun spark-pool", " ".join(job.command), "starts a pool across the nodes of a Slurm "
                             "allocation, and this shell holds none", valid=OUTSIDE_ALLOCATION)
        check_spark_here(job.template, job.template_set, machine)
        conf = dict(DEFAULT_CONF)
        placeholder_gpus = job.placeholder_gpus
        if job.template:
            template = template_of(job.template, dict(job.template_set))
            conf.update(template.spark_conf())
            placeholder_gpus = placeholder_gpus or template.gpu.placeholders
        conf.update(job.conf)
        if "spark.master" in conf:
            raise UsageError("spark.master", conf["spark.master"], "is the pool's own, which trainrun spark-pool starts",
                             valid="no spark.master; a pool of your own: spark-submit --master URL without trainrun")
        in_image = job.container_runtime not in (None, "host")
        if EXECUTOR_DISCOVERY_SCRIPT in conf and not in_image:
            conf[EXECUTOR_DISCOVERY_SCRIPT] = discovery_script_here(conf[EXECUTOR_DISCOVERY_SCRIPT])
        pool = plan_pool(machine.slurm, conf, machine.free_port, placeholder_gpus=placeholder_gpus, pool_conf=conf)
        route = pool_route(job.container_runtime, job.container_image, machine.cwd, home_cache(machine.environ),
                           machine.is_root, gpus=bool(pool.worker_gpus) and not pool.placeholder_gpus)
        pool = dataclasses.replace(pool, route=route)
        # In the image, the image's own Spark and Python.
        env = {**run_env(job.run), **({} if in_image else host_spark_env(machine))}
        return Plan(backend=f"spark pool (Slurm, {len(pool.nodes)} workers)", argv=pool.argv(machine.python, job.command),
                    env=env, spark_conf=conf, launcher="the Spark pool", master=pool.master_url,
                    container_image=route.image,
                    notes=(pool.note(machine.slurm.job_id),), run=job.run)


def add_parser(sub: Any) -> None:
    """`trainrun spark-pool` in trainrun's subcommands (trainrun.arguments.build_parser)."""
    pool = sub.add_parser("spark-pool", usage="trainrun spark-pool [--template NAME] [--conf KEY=VALUE] -- COMMAND ARGS",
                          help="inside salloc or sbatch: a Spark pool across the allocation for one command",
                          description="Inside salloc or sbatch: starts a Spark standalone pool across the "
                                      "allocation's nodes (the master on the first, a worker on each through srun), "
                                      "runs COMMAND on it (spark-submit, python, jupyter lab: SPARK_CONF_DIR and "
                                      "MASTER name the pool), then stops the pool.")
    add_conf_options(pool, "cluster template name or file: its executors size the workers, its Spark conf reaches "
                           "the pool's drivers")
    add_option(pool, "--placeholder-gpus", action="store_true",
               help="the workers report GPU addresses without devices (the template's gpu.placeholders), so that "
                    "Spark's GPU scheduling runs on CPUs; Slurm is asked for no GPUs")
    images = pool.add_argument_group("in the image", "Master, workers and the command in the image, each an srun "
                                     "step under the nodes' container runtime.")
    add_container_options(images)
    add_job_options(pool, "a command, e.g. spark-submit train.py or python train.py")
    pool.set_defaults(make_job=job_from_args)


def job_from_args(args: argparse.Namespace, command: list[str], run: RunOptions) -> SparkPoolJob:
    """The job `trainrun spark-pool`'s options describe (trainrun.arguments.job_from_args)."""
    return SparkPoolJob(command=tuple(command), template=args.template,
                        template_set=tuple(key_value("--set", item) for item in args.template_set),
                        conf=tuple(spark_conf_item("--conf", item) for item in args.conf),
                        placeholder_gpus=args.placeholder_gpus, container_runtime=args.container_runtime,
                        container_image=args.container_image, run=run)
