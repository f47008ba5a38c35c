"""The notebook's Spark session: the configuration `%%configure` puts in force, the master it runs on, and the
predefined `spark` and `sc`, as Synapse and Databricks notebooks have them.

The configuration reaches Spark through PYSPARK_SUBMIT_ARGS, which PySpark reads whenever it starts the JVM: the
notebook's `spark`, and any session a library makes (TorchDistributor, horovod.spark, spark-tensorflow-distributor
call `SparkSession.builder.getOrCreate()`), start with it. A master given explicitly in code still wins.
"""
from __future__ import annotations

import argparse
import ast
import atexit
import os
import shlex
import sys
from typing import Any, Mapping

from ..arguments import TrainrunParser
from ..errors import UsageError
from ..machine import available_cpus, available_memory
from ..messages import plan_text
from ..plan import Plan
from .errors import CellError

SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"
# The pool's master and its template, set for a notebook attached to a pool: a local pool's notebook container
# (`invoke pool.up --notebook`), or JupyterLab as the command of an allocation's pool (`trainrun spark-pool`).
POOL_MASTER_ENV = "TRAINSTACK_POOL_MASTER"
POOL_TEMPLATE_ENV = "TRAINSTACK_POOL_TEMPLATE"
SUBJECT = "%%configure"
# The plan of the notebook's session: what trainrun's messages call it, and the process that starts its JVM.
SESSION_BACKEND = "spark (notebook session)"
SESSION_LAUNCHER = "PySpark's spark-submit"
SESSION_NAMES = ("spark", "sc")
# Packages whose jobs run on the active session, so importing one starts it.
SESSION_MODULES = ("pyspark", "spark_tensorflow_distributor", "sparkdl")


def pool_master() -> str | None:
    """The master of the pool this notebook is attached to, if any (with its template)."""
    master = os.environ.get(POOL_MASTER_ENV)
    return master if master and os.environ.get(POOL_TEMPLATE_ENV) else None


def session_plan(body: str = "", template: str | None = None, assignments: tuple[str, ...] = ()) -> Plan:
    """The plan of the session a `%%configure` cell asks for (its JSON body, or a template with --set), checked
    and sized by pooltemplates (pooltemplates.configure) to the pool this notebook is attached to, else to this
    container under a local master. Raises CellError with one line per problem."""
    from pooltemplates import TemplateError
    from pooltemplates.configure import Room, configure_session

    on_pool = pool_master()
    try:
        session = configure_session(Room(available_cpus(), available_memory()), body, template, assignments,
                                    pool=os.environ[POOL_TEMPLATE_ENV] if on_pool else None)
    except TemplateError as exc:
        raise CellError.from_template_error(exc) from None
    master = on_pool or f"local[{session.slots}]"
    return Plan(backend=SESSION_BACKEND, argv=["spark-submit", *submit_words(master, session.conf)],
                spark_conf=dict(session.conf), ranks=session.slots,
                local_ranks=session.slots if master.startswith("local") else 0, launcher=SESSION_LAUNCHER,
                master=master, notes=session.notes)


def submit_words(master: str, conf: Mapping[str, str]) -> list[str]:
    """spark-submit's arguments for a session on `master` with `conf`, as PySpark starts the session's JVM:
    `spark-submit` followed by PYSPARK_SUBMIT_ARGS, which ends in `pyspark-shell`."""
    words = ["--master", master]
    for key, value in conf.items():
        words += ["--conf", f"{key}={value}"]
    return [*words, "pyspark-shell"]


def submit_args(master: str, conf: Mapping[str, str]) -> str:
    """PYSPARK_SUBMIT_ARGS for a session on `master` with `conf`, quoted as PySpark splits them."""
    return shlex.join(submit_words(master, conf))


def apply(plan: Plan) -> None:
    """Put a session's plan in force for the next JVM this process starts."""
    os.environ[SUBMIT_ARGS] = submit_args(plan.master, plan.spark_conf)


def running() -> bool:
    try:
        from pyspark import SparkContext
    except ImportError:  # pyspark is not a dependency of trainrun[notebook]: no session runs without it
        return False
    return SparkContext._active_spark_context is not None


def start() -> Any:
    """The session with the configuration in force (the running one, if any).

    Its JVM starts in a process group of its own. A kernel told to shut down signals every process of its group
    (ipykernel's children, then jupyter_client's SIGTERM to the group): a JVM among them ran Spark's shutdown hooks
    while the kernel's exit still stopped the context, and printed `IOException: Failed to delete` for the
    temporary folders whose `rm` the signals killed. Outside the group, the kernel's exit stops it (stop_at_exit),
    and a kernel killed outright still ends it: the JVM exits when its stdin closes."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    if SparkContext._gateway is None:
        SparkContext._ensure_initialized(gateway=launch_gateway(popen_kwargs={"start_new_session": True}))
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


def stop_at_exit() -> None:
    """Stop any session and wait for its JVM as the kernel exits, as PySpark's own shell stops its context at
    exit: otherwise the JVM outlives a kernel shut down, running Spark's shutdown hooks on its own."""
    if "pyspark" in sys.modules:
        stop()


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
        self.session: Any = None
        if pool_master() is not None or SUBMIT_ARGS not in os.environ:  # a user's own PYSPARK_SUBMIT_ARGS stays
            try:
                apply(session_plan())
            except CellError as exc:  # the kernel still starts; the first %%configure cell names it again
                print(f"trainrun: the notebook's Spark session keeps Spark's defaults: {exc}", file=sys.stderr)
        shell.events.register("pre_run_cell", self.before_cell)
        atexit.unregister(stop_at_exit)  # once per process, however many times the extension loads
        atexit.register(stop_at_exit)

    def configure(self, line: str, cell: str | None) -> None:
        """`%%configure` with a body or `--template`, or `%configure` (the line alone): checks the session, then
        puts it in force (with -f, restarting a running session), or with --dry-run prints its plan only."""
        args = parse_configure_line(line)
        if args.help:
            print(configure_parser().format_help(), end="")
            return
        plan = session_plan(cell or "", args.template, tuple(args.set))
        if args.dry_run:
            print(plan_text(plan, args.json), end="")
            return
        if running() and not args.force:
            print(f"A Spark session is already running, so this configuration was not applied. `{SUBJECT} -f` "
                  "stops the session (progress in its Spark jobs is lost) and starts one with the new configuration.")
            return
        restart = running()
        if restart:
            stop()
        apply(plan)
        print(f"Spark session configured ({'restarted' if restart else 'starts on first use of spark'}):")
        print(plan_text(plan, False), end="")
        if restart:
            self.bind(start())

    def session_for_job(self) -> Any:
        """The notebook's session, started if it is not yet, for a barrier stage that runs in it."""
        if self.session is None or not running() or not all(self._ours(name) for name in SESSION_NAMES):
            self.bind(start())
        return self.session

    def before_cell(self, info: Any) -> None:
        source = info.raw_cell or ""
        if source.lstrip().startswith(("%%trainrun", "%%configure", "%configure")):
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


def configure_parser() -> TrainrunParser:
    usage = (f"{SUBJECT} [-f] [--dry-run [--json]] [--template NAME [--set KEY=VALUE ...]], then the session's "
             "JSON body below the line (or the line alone: %configure ...)")
    parser = TrainrunParser(prog=SUBJECT, add_help=False, usage=usage.replace("%", "%%"))
    parser.add_argument("-f", "--force", action="store_true",
                        help="stop a running session (progress in its Spark jobs is lost) and start the new one")
    parser.add_argument("--template", metavar="NAME", help="a pool template (packaged name or .yaml file) instead "
                        "of a body")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="with --template: a template setting or a Spark conf key, e.g. executor.instances=2 "
                             "or spark.sql.shuffle.partitions=8")
    parser.add_argument("--dry-run", action="store_true", help="print the session's plan; apply nothing")
    parser.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    parser.add_argument("-h", "--help", action="store_true", help="this help")
    parser.add_argument("words", nargs="*", help=argparse.SUPPRESS)
    return parser


def parse_configure_line(line: str) -> argparse.Namespace:
    """The options of a `%%configure` line; a bad one is one line naming it (CellError)."""
    try:
        tokens = shlex.split(line)
    except ValueError as exc:
        raise CellError(f"{SUBJECT}: line = {line!r}: {exc} (valid: options as a shell splits them)") from None
    try:
        args = configure_parser().parse_args(tokens)
        if args.words:
            raise UsageError("line", " ".join(args.words), f"is not an option of {SUBJECT}",
                             valid="-f, --template NAME, --set KEY=VALUE, --dry-run; the JSON body goes below the "
                                   "line")
        if args.json and not args.dry_run:
            raise UsageError("--json", True, valid="together with --dry-run")
    except UsageError as exc:
        raise CellError(f"{SUBJECT}: {exc}") from None
    return args
