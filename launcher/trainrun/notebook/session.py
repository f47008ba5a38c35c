"""The notebook's Spark session: the configuration `%%configure` puts in force, the master it runs on, and the
predefined `spark` and `sc`, as Synapse and Databricks notebooks have them.

The configuration reaches Spark through PYSPARK_SUBMIT_ARGS, which PySpark reads whenever it starts the JVM: the
notebook's `spark`, and any session a library makes (TorchDistributor, horovod.spark, spark-tensorflow-distributor
call `SparkSession.builder.getOrCreate()`), start with it. A master given explicitly in code still wins.
"""
from __future__ import annotations

import argparse
import ast
import os
import shlex
import sys
from dataclasses import dataclass
from typing import Any, Mapping

from pooltemplates import PoolTemplate, Problem, TemplateError, load_template
from pooltemplates.units import parse_size

from ..machine import available_cpus, available_memory
from .errors import CellError

SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"
# Set on a notebook container of a local pool (`invoke pool.up --notebook`): the pool's master, and its template.
POOL_MASTER_ENV = "TRAINSTACK_POOL_MASTER"
POOL_TEMPLATE_ENV = "TRAINSTACK_POOL_TEMPLATE"
SUBJECT = "%%configure"
# What a JVM gets when the cell says nothing of the driver's memory (Spark's default).
SPARK_DEFAULT_DRIVER_MEMORY = "1g"
SESSION_NAMES = ("spark", "sc")
# Packages whose jobs run on the active session, so importing one starts it.
SESSION_MODULES = ("pyspark", "spark_tensorflow_distributor", "sparkdl")


@dataclass(frozen=True)
class SessionPlan:
    """What a session is started with: the master and the Spark conf."""

    master: str
    conf: Mapping[str, str]

    def submit_args(self) -> str:
        args = ["--master", self.master]
        for key, value in self.conf.items():
            args += ["--conf", f"{key}={value}"]
        return shlex.join([*args, "pyspark-shell"])

    def describe(self) -> str:
        return "\n".join([f"master: {self.master}", *(f"  {key}={value}" for key, value in self.conf.items())])


def pool_template() -> PoolTemplate | None:
    """The template of the local pool this notebook is attached to, if any."""
    path = os.environ.get(POOL_TEMPLATE_ENV)
    return load_template(path) if path and os.environ.get(POOL_MASTER_ENV) else None


def session_defaults(pool: PoolTemplate | None) -> dict[str, Any]:
    """The sizing a cell that leaves it out gets: the pool's executors, or one executor with every core here."""
    if pool is not None:
        return {"numExecutors": pool.executor.instances, "executorCores": pool.executor.cores,
                "executorMemory": pool.executor.memory}
    return {"numExecutors": 1, "executorCores": available_cpus()}


def plan_session(template: PoolTemplate, pool: PoolTemplate | None) -> SessionPlan:
    """The session for a checked template: on the pool's master within the pool's size, else a local master sized
    to this container; a request larger than either is refused with every problem named."""
    problems = list(_pool_problems(template, pool) if pool is not None else _machine_problems(template))
    if problems:
        raise TemplateError(SUBJECT, problems)
    conf = dict(template.spark_conf())
    slots = template.executor.instances * (template.executor.cores or 1)
    if pool is not None:
        conf["spark.cores.max"] = str(slots)
        return SessionPlan(os.environ[POOL_MASTER_ENV], conf)
    return SessionPlan(f"local[{slots}]", conf)


def _machine_problems(template: PoolTemplate) -> list[Problem]:
    instances, cores = template.executor.instances, template.executor.cores or 1
    problems = []
    cpus = available_cpus()
    if instances * cores > cpus:
        problems.append(Problem("numExecutors × executorCores", f"{instances} × {cores} = {instances * cores}",
                                f"this container has {cpus} cores, and a notebook's local master runs every "
                                "executor's tasks on them", f"at most {cpus} in all, or a notebook attached to a "
                                "pool (invoke pool.up --notebook)"))
    memory = available_memory()
    driver = parse_size(template.driver.memory or SPARK_DEFAULT_DRIVER_MEMORY).bytes
    executors = instances * parse_size(template.executor.memory).bytes if template.executor.memory else 0
    if memory is not None and driver + executors > memory:
        problems.append(Problem("driverMemory + numExecutors × executorMemory",
                                f"{template.driver.memory or SPARK_DEFAULT_DRIVER_MEMORY} + {instances} × "
                                f"{template.executor.memory}", f"needs {_gib(driver + executors)}, more than this "
                                f"container's {_gib(memory)}", f"at most {_gib(memory)} in all"))
    return problems


def _pool_problems(template: PoolTemplate, pool: PoolTemplate) -> list[Problem]:
    problems = []
    limits = [("numExecutors", template.executor.instances, pool.executor.instances),
              ("executorCores", template.executor.cores, pool.executor.cores)]
    for name, asked, most in limits:
        if asked is not None and most is not None and asked > most:
            problems.append(Problem(name, asked, f"the pool {pool.name!r} has {most}", f"at most {most}"))
    if template.executor.memory and pool.executor.memory and \
            parse_size(template.executor.memory).bytes > parse_size(pool.executor.memory).bytes:
        problems.append(Problem("executorMemory", template.executor.memory,
                                f"the pool {pool.name!r} gives executors {pool.executor.memory}",
                                f"at most {pool.executor.memory}"))
    return problems


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB"


def apply(plan: SessionPlan) -> None:
    """Put the plan in force for the next JVM this process starts."""
    os.environ[SUBMIT_ARGS] = plan.submit_args()


def running() -> bool:
    try:
        from pyspark import SparkContext
    except ImportError:  # pyspark is not a dependency of trainrun[notebook]: no session runs without it
        return False
    return SparkContext._active_spark_context is not None


def start() -> Any:
    """The session with the configuration in force (the running one, if any)."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()


def stop() -> None:
    """Stop the running session and its JVM, so the next one starts a JVM with the new driver settings."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is not None:
        context.stop()
    gateway = SparkContext._gateway
    if gateway is not None:
        gateway.shutdown()
        process = getattr(gateway, "proc", None)
        if process is not None:  # the JVM exits when its stdin closes
            process.stdin.close()
            process.wait(timeout=60)
        SparkContext._gateway = None
        SparkContext._jvm = None


def uses_spark(source: str) -> bool:
    """Whether a cell needs the notebook's session first: it reads `spark` or `sc` without defining them itself, or
    imports what runs on the active session (TorchDistributor, horovod.spark, spark-tensorflow-distributor: they
    expect it to exist, as it does in Synapse and Databricks notebooks)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    names = [node for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id in SESSION_NAMES]
    if {node.id for node in names if isinstance(node.ctx, ast.Load)} - {node.id for node in names
                                                                        if isinstance(node.ctx, ast.Store)}:
        return True
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    return any(module.split(".")[0] in SESSION_MODULES or module.startswith("horovod.spark") for module in imported)


class NotebookSpark:
    """The session state of one kernel: the configuration in force, and `spark` / `sc` in its namespace, made
    before the first cell that reads them runs."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.pool = pool_template()
        self.session: Any = None
        if self.pool is not None or SUBMIT_ARGS not in os.environ:  # a user's own PYSPARK_SUBMIT_ARGS stays
            apply(plan_session(self._template_from_body({}), self.pool))
        shell.events.register("pre_run_cell", self.before_cell)

    def _template_from_body(self, body: Mapping[str, Any]) -> PoolTemplate:
        from pooltemplates.configure import template_from_body

        return template_from_body(body, session_defaults(self.pool))

    def configure(self, line: str, cell: str) -> None:
        from pooltemplates import parse_assignments
        from pooltemplates.configure import parse_body

        options = configure_parser()
        try:
            args = options.parse_args(shlex.split(line))
            if args.template and cell.strip():
                raise CellError(f"{SUBJECT}: --template = {args.template!r}: a cell has either a JSON body or "
                                "--template (valid: one of them)")
            template = (load_template(args.template, parse_assignments(args.set)) if args.template else
                        self._template_from_body(parse_body(cell)))
            plan = plan_session(template, self.pool)
        except (TemplateError, ValueError) as exc:
            raise CellError(str(exc)) from None
        if running() and not args.force:
            print(f"A Spark session is already running, so this configuration was not applied. `{SUBJECT} -f` "
                  "stops the session (progress in its Spark jobs is lost) and starts one with the new configuration.")
            return
        restart = running()
        if restart:
            stop()
        apply(plan)
        print(f"Spark session configured ({'restarted' if restart else 'starts on first use of spark'}):\n"
              f"{plan.describe()}")
        if restart:
            self.bind(start())

    def before_cell(self, info: Any) -> None:
        source = info.raw_cell or ""
        if source.lstrip().startswith(("%%trainrun", f"{SUBJECT}")):
            return
        if not uses_spark(self.shell.transform_cell(source)):
            return
        if not all(self._ours(name) for name in SESSION_NAMES):
            return  # the user made their own
        if self.session is None or not running():
            try:
                self.bind(start())
            except Exception as exc:  # the cell then fails on the name; say why first
                print(f"trainrun: could not start the Spark session: {exc}", file=sys.stderr)

    def _ours(self, name: str) -> bool:
        value = self.shell.user_ns.get(name)
        return value is None or value is self.session or (self.session is not None and
                                                           value is self.session.sparkContext)

    def bind(self, session: Any) -> None:
        self.session = session
        self.shell.user_ns.update({"spark": session, "sc": session.sparkContext})


def configure_parser() -> argparse.ArgumentParser:
    parser = _CellArgumentParser(prog=SUBJECT, add_help=False)
    parser.add_argument("-f", "--force", action="store_true")
    parser.add_argument("--template")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    return parser


class _CellArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ValueError(f"{SUBJECT}: {message} (valid: -f, --template NAME, --set KEY=VALUE)")
