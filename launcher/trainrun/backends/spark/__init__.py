"""A Spark barrier stage (one task per process) run by trainrun's Spark driver, or in the caller's own SparkSession
(trainrun.run(spark=session): the plan's BarrierStage), or TorchDistributor-style local mode on this host; `trainrun
spark`'s options and the job they describe."""
from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ...arguments import add_job_options, add_option, non_negative, positive
from ...errors import MissingBackend, UsageError
from ...job import MpiJob, SparkJob, TorchJob
from ...machine import Machine
from ...plan import Plan, RunOptions, run_env
from ...program import Program, program_from_script_args
from ...validate import check_reachable, key_value, rank_count, rank_list, spark_conf_item, spark_master
from ..mpi import MpiPlanner
from ..torch import TorchPlanner

INSTALL_PYSPARK = "pip install pyspark"
INSTALL_JAVA = "install Java 17 (apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
INSTALL_TEMPLATES = "pip install ./templates (the trainstack cluster templates package `pooltemplates`)"
FRAMEWORKS = ("torch", "horovod")
TASK_GPUS = "spark.task.resource.gpu.amount"
# In the keys of Spark's GPU scheduling: spark.{driver,executor,task,worker}.resource.gpu.{amount,discoveryScript}.
GPU_RESOURCE = ".resource.gpu."
# Progress bars would interleave with the rank output the driver prints.
DEFAULT_CONF = {"spark.ui.showConsoleProgress": "false"}
DRIVER_MODULE = "trainrun.backends.spark.driver"
# The master spark-submit takes when neither --master nor the Spark conf names one; a pool that trainrun starts in an
# allocation sets it for the command it runs.
MASTER_VARIABLE = "MASTER"
# What trainrun's messages call the driver process, and the stage a SparkSession runs in this process.
DRIVER = "the Spark driver"
STAGE = "the Spark stage"

TemplateConf = Callable[[str, Mapping[str, str], int, bool], Mapping[str, str]]


@dataclass(frozen=True, kw_only=True)
class BarrierStage:
    """A barrier stage of one task per rank in a SparkSession: what every task runs, and how. The driver process
    of `trainrun spark` runs one in the session it makes; a plan's stage (trainrun.run(spark=session)) runs in the
    caller's session, in this process."""

    session: Any = field(compare=False, repr=False)
    num_processes: int
    program: Program
    framework: str  # FRAMEWORKS
    use_gpu: bool
    ranks_filter: str | None = None  # show only these ranks' output, e.g. "0" or "0,1"
    rank_cwd: str | None = None  # where each rank starts; None: its executor's work folder
    max_restarts: int = 0  # a failed stage runs again up to N times

    def run(self, run: RunOptions) -> None:
        """Runs the stage here, with the exit barrier and the timeout of `run`; raises JobFailed as trainrun's
        runner does."""
        from .driver import run_in_session

        run_in_session(self, run)

    def to_dict(self) -> dict:
        return {"program": self.program.rank_args(), "framework": self.framework, "use_gpu": self.use_gpu,
                "ranks_filter": self.ranks_filter, "max_restarts": self.max_restarts}

    def to_text(self) -> str:
        shown = f", output of ranks {self.ranks_filter}" if self.ranks_filter is not None else ""
        restarts = f", run again up to {self.max_restarts} times if it fails" if self.max_restarts else ""
        return (f"a task per rank runs {shlex.join(self.program.rank_args())} ({self.framework}, "
                f"{'GPUs' if self.use_gpu else 'no GPUs'}{shown}{restarts})")


def pooltemplates_conf(name: str, overrides: Mapping[str, str], num_processes: int, use_gpu: bool) -> Mapping[str, str]:
    """The Spark conf of a cluster template, after the template's own barrier-job checks."""
    try:
        import pooltemplates
    except ImportError:
        raise MissingBackend("pooltemplates", INSTALL_TEMPLATES) from None
    try:
        template = pooltemplates.load_template(name, overrides)
        pooltemplates.check_barrier_job(template, num_processes, use_gpu)
    except pooltemplates.TemplateError as err:
        raise UsageError("--template", name, valid=f"a template that fits this job: {err}") from None
    return template.spark_conf()


def check_spark_here(template: str | None, template_set: tuple[tuple[str, str], ...], machine: Machine) -> None:
    """What a Spark job started from this host needs: --set only with --template, PySpark and Java here."""
    if template_set and not template:
        raise UsageError("--set", template_set[0][0], valid="used together with --template")
    if not machine.has_pyspark:
        raise MissingBackend("pyspark", INSTALL_PYSPARK)
    if not machine.has_java:
        raise MissingBackend("java", INSTALL_JAVA)


def host_spark_env(machine: Machine) -> dict[str, str]:
    """The Spark and Python the executors of a job started from this host run, unless the user set them: SPARK_HOME
    (local-cluster and a pool's workers start from it) and PYSPARK_PYTHON."""
    env = {}
    if machine.spark_home and "SPARK_HOME" not in machine.environ:
        env["SPARK_HOME"] = machine.spark_home
    if "PYSPARK_PYTHON" not in machine.environ:
        env["PYSPARK_PYTHON"] = machine.python
    return env


def wants_gpu(job: SparkJob) -> bool:
    """--use-gpu, --no-gpu, else whether the job's own --conf gives tasks GPUs. A template's GPUs alone do not
    count: local-pool's are placeholders, so that Spark's GPU scheduling runs without GPU hardware."""
    if job.use_gpu is not None:
        return job.use_gpu
    conf = dict(job.conf)
    try:
        return float(conf.get(TASK_GPUS, "0")) > 0
    except ValueError:
        raise UsageError(TASK_GPUS, conf[TASK_GPUS], valid="a number of GPUs per task") from None


def without_gpu_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """A template's conf without its GPU scheduling (resource amounts, discovery scripts), for a job on CPUs."""
    return {key: value for key, value in conf.items() if GPU_RESOURCE not in key}


def check_discovery_scripts(conf: Mapping[str, str], master: str) -> None:
    """Under a local master the executors run on this host, and so does each GPU discovery script: a missing one
    would leave the job waiting for GPUs that never come, without a word."""
    if not master.startswith("local"):
        return
    for key, path in sorted(conf.items()):
        if key.endswith(GPU_RESOURCE + "discoveryScript") and not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise UsageError(key, path, f"is not an executable file on this host, where {master} runs the executors",
                             valid="--no-gpu (the template's GPU settings go), a --master whose workers have the "
                                   "script (the local pool: invoke pool.up), or the path of a discovery script here")


class SparkPlanner:
    def __init__(self, template_conf: TemplateConf = pooltemplates_conf) -> None:
        self.template_conf = template_conf

    def plan(self, job: SparkJob, machine: Machine) -> Plan:
        rank_count("--num-processes", job.num_processes)
        if job.template_set and not job.template:
            raise UsageError("--set", job.template_set[0][0], valid="used together with --template")
        if job.framework not in FRAMEWORKS:
            raise UsageError("--framework", job.framework, valid=" or ".join(FRAMEWORKS))
        shown = None if job.ranks_filter is None else rank_list("--ranks-filter", job.ranks_filter,
                                                                  job.num_processes)
        if job.local_mode:
            return self._local_plan(job, machine, shown)
        if job.session is not None:
            return self._session_plan(job, shown)
        check_spark_here(job.template, job.template_set, machine)
        use_gpu = wants_gpu(job)
        conf = self._conf(job, use_gpu)
        if use_gpu and TASK_GPUS not in conf:
            raise UsageError("--use-gpu", True, valid=f"a template or --conf that sets {TASK_GPUS}")
        pool = None
        given_master = job.master or conf.get("spark.master") or machine.environ.get(MASTER_VARIABLE)
        if machine.slurm is not None and not given_master:
            # Inside salloc or sbatch: a pool across the allocation's nodes, started for this job.
            from .allocation_pool import plan_pool  # not at import: `python -m` runs that module

            pool = plan_pool(machine.slurm, conf, machine.free_port, num_processes=job.num_processes)
        master = given_master or (pool.master_url if pool else f"local[{job.num_processes}]")
        option = "--master" if job.master else "spark.master" if "spark.master" in conf else MASTER_VARIABLE
        standalone_masters = spark_master(option, master)
        check_discovery_scripts(conf, master)
        if job.check_master and pool is None:
            check_reachable(option, master, standalone_masters)
        # A pool of the allocation runs the ranks in the job's folder, which every node sees, as srun's tasks.
        argv = driver_argv(job, machine.python, master, use_gpu, conf, shown, machine.cwd if pool else None)
        if pool is not None:
            argv = pool.argv(machine.python, argv)
        env = {**run_env(job.run), **host_spark_env(machine)}
        if master.startswith("local-cluster") and "SPARK_WORKER_DIR" not in machine.environ:
            # Executors' work dirs would otherwise land inside the pyspark package.
            env["SPARK_WORKER_DIR"] = os.path.join(machine.environ.get("TMPDIR", "/tmp"), "trainrun-spark-work")
        if pool is not None:
            notes: tuple[str, ...] = (pool.note(machine.slurm.job_id),)
        elif given_master:
            notes = ()
        else:
            notes = (f"no --master: Spark runs every rank on this host ({master}); a pool's: --master "
                     "spark://HOST:7077 (invoke pool.status prints it)",)
        if job.max_restarts:
            notes += (f"--max-restarts {job.max_restarts}: a failed stage runs again once every rank has a task slot; "
                      "Spark checks every spark.scheduler.barrier.maxConcurrentTasksCheck.interval (15s), up to "
                      ".maxFailures (40) times",)
        return Plan(backend="spark (Slurm pool)" if pool else "spark", argv=argv, env=env, spark_conf=dict(conf),
                    ranks=job.num_processes, local_ranks=job.num_processes if master.startswith("local") else 0,
                    launcher=DRIVER, output_tags="lines", master=master, notes=notes, run=job.run)

    def _session_plan(self, job: SparkJob, shown: str | None) -> Plan:
        """The stage in the caller's SparkSession: its master and conf are the session's; no process starts, only
        the stage's tasks (BarrierStage.run)."""
        if job.template or job.conf or job.master:
            raise UsageError("spark", "a SparkSession", "is used as it is",
                             valid="a SparkSession without a master, template or Spark conf of trainrun's")
        master = job.session.sparkContext.master
        stage = BarrierStage(session=job.session, num_processes=job.num_processes, program=job.program,
                             framework=job.framework, use_gpu=bool(job.use_gpu), ranks_filter=shown,
                             max_restarts=job.max_restarts)
        return Plan(backend="spark (session)", argv=[], ranks=job.num_processes,
                    local_ranks=job.num_processes if master.startswith("local") else 0, launcher=STAGE,
                    output_tags="lines", master=master, run=job.run, stage=stage)

    def _conf(self, job: SparkJob, use_gpu: bool) -> dict[str, str]:
        conf = dict(DEFAULT_CONF)
        if job.template:
            template = self.template_conf(job.template, dict(job.template_set), job.num_processes, use_gpu)
            conf.update(template if use_gpu else without_gpu_conf(template))
        conf.update(job.conf)
        return conf

    def _local_plan(self, job: SparkJob, machine: Machine, shown: str | None) -> Plan:
        """TorchDistributor's local_mode: all ranks on this host, no Spark session needed."""
        if job.template:
            self._conf(job, bool(job.use_gpu))
        if job.use_gpu and machine.gpu_count < job.num_processes:
            raise UsageError("--num-processes", job.num_processes,
                             valid=f"at most {machine.gpu_count} with --use-gpu --local-mode (GPUs on this host)")
        if job.framework == "torch":
            plan = TorchPlanner().plan(TorchJob(nproc_per_node=job.num_processes, program=job.program,
                                                local_ranks_filter=shown, max_restarts=job.max_restarts,
                                                run=job.run), machine)
        elif job.max_restarts:
            raise UsageError("--max-restarts", job.max_restarts,
                             valid="0 with --framework horovod --local-mode (mpirun restarts nothing)")
        else:
            plan = MpiPlanner().plan(MpiJob(num_processes=job.num_processes, program=job.program, ranks_filter=shown,
                                            run=job.run), machine)
        return dataclasses.replace(plan, backend=f"spark local mode: {plan.backend}")


def driver_argv(job: SparkJob, python: str, master: str, use_gpu: bool, conf: Mapping[str, str],
                shown: str | None, rank_cwd: str | None = None) -> list[str]:
    """`python -m trainrun.backends.spark.driver OPTIONS -- RANK_ARGS`, read by the driver's parse_args."""
    argv = [python, "-m", DRIVER_MODULE, "--master", master, "--num-processes", str(job.num_processes),
            "--framework", job.framework, "--use-gpu" if use_gpu else "--no-gpu"]
    for key, value in sorted(conf.items()):
        argv += ["--conf", f"{key}={value}"]
    if job.run.verbose:
        argv.append("--verbose")
    if shown is not None:
        argv += ["--ranks-filter", shown]
    if rank_cwd is not None:
        argv += ["--rank-cwd", rank_cwd]
    if job.max_restarts:
        argv += ["--max-restarts", str(job.max_restarts)]
    return [*argv, "--", *job.program.rank_args()]


def add_parser(sub: Any) -> None:
    """`trainrun spark` in trainrun's subcommands (trainrun.arguments.build_parser)."""
    spark = sub.add_parser("spark", usage="trainrun spark --num-processes N [--master URL] [--template NAME] "
                           "[--use-gpu|--no-gpu] [--local-mode] script.py ARGS",
                           help="a Spark barrier stage, one task per process (as TorchDistributor)",
                           description="Runs one Spark barrier stage with a task per rank.")
    add_option(spark, "--num-processes", "-np", type=positive, required=True, metavar="N",
               help="the number of ranks")
    spark.add_argument("--master", help="Spark master URL (default: the template's, else local[N])")
    add_conf_options(spark, "cluster template name or file whose Spark conf is applied")
    gpu = spark.add_mutually_exclusive_group()
    add_option(gpu, "--use-gpu", dest="use_gpu", action="store_true", default=None,
               help="GPUs for the ranks (needs spark.task.resource.gpu.amount; default: when --conf gives tasks "
                    "GPUs; a template's GPUs alone do not count)")
    add_option(gpu, "--no-gpu", dest="use_gpu", action="store_false",
               help="run without GPUs (the default; drops the template's GPU settings)")
    add_option(spark, "--local-mode", action="store_true", help="all ranks on this host, like TorchDistributor")
    add_option(spark, "--ranks-filter", metavar="RANKS", help="show only these ranks' output, e.g. 0 or 0,1")
    add_option(spark, "--max-restarts", type=non_negative, default=0, metavar="N",
               help="run the stage again up to N times if it fails (a rank failed, an executor or worker was lost), "
                    "once every rank has a task slot again; as torchrun's --max-restarts")
    spark.add_argument("--framework", choices=FRAMEWORKS, default="torch",
                       help="torch: a torch.distributed rank per task, with torchrun's variables; horovod: Horovod "
                            "ranks")
    add_job_options(spark, "a Python script or -m module")
    spark.set_defaults(make_job=job_from_args)


def add_conf_options(parser: argparse.ArgumentParser, template_help: str) -> None:
    """--template, --set and --conf: the Spark conf of `trainrun spark` and `trainrun spark-pool`."""
    parser.add_argument("--template", help=template_help)
    parser.add_argument("--set", dest="template_set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a template setting, e.g. executor.instances=4")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")


def job_from_args(args: argparse.Namespace, command: list[str], run: RunOptions) -> SparkJob:
    """The job `trainrun spark`'s options describe (trainrun.arguments.job_from_args)."""
    conf = tuple(spark_conf_item("--conf", item) for item in args.conf)
    template_set = tuple(key_value("--set", item) for item in args.template_set)
    return SparkJob(num_processes=args.num_processes, program=program_from_script_args("command", command),
                    master=args.master, template=args.template, template_set=template_set, conf=conf,
                    use_gpu=args.use_gpu, local_mode=args.local_mode, framework=args.framework,
                    ranks_filter=args.ranks_filter, max_restarts=args.max_restarts, check_master=not args.dry_run,
                    run=run)
