"""`%%trainrun` runs a cell on N ranks through trainrun's plans and runner (in a notebook attached to a pool, `spark`
on the pool); `%%configure` (and `%configure`, the line alone) sets the notebook's Spark session as Synapse and
sparkmagic do; `spark` and `sc` are made on first use."""
from __future__ import annotations

import argparse
import dataclasses
import re
import shlex
import sys
from typing import Any

from IPython.core.magic import Magics, cell_magic, line_cell_magic, magics_class

from ..arguments import build_parser, job_from_args
from ..backends import plan_job
from ..job import MpiJob, SparkJob, TorchJob
from ..machine import detect_machine
from ..messages import announce, plan_text
from .cell import CELL_FILENAME, compile_cell, run_cell
from .errors import CellError
from .session import NotebookSpark, pool_master

CELL_BACKENDS = ("mpi", "torch", "spark")
PUSH_OPTION = "--push"
# `%%configure OPTIONS` alone on its cell: IPython refuses a cell magic without a body ("the cell body is empty").
ONE_LINE_CONFIGURE = re.compile(r"%%configure(\s|$)")


def take_push(tokens: list[str]) -> tuple[list[str], list[str]]:
    """The notebook variables `--push NAME[,NAME...]` (repeatable) names, and the other tokens."""
    names: list[str] = []
    rest: list[str] = []
    tokens = list(tokens)
    while tokens:
        token = tokens.pop(0)
        if token == PUSH_OPTION or token.startswith(PUSH_OPTION + "="):
            value = token.partition("=")[2] if "=" in token else (tokens.pop(0) if tokens else "")
            found = [name for name in value.split(",") if name]
            if not found or not all(name.isidentifier() for name in found):
                raise CellError(f"trainrun: {PUSH_OPTION} = {value!r}: names no notebook variable "
                                f"(valid: NAME[,NAME...], e.g. {PUSH_OPTION} model,lr)")
            names += found
        else:
            rest.append(token)
    return names, rest


def parse_cell_options(line: str) -> tuple[argparse.Namespace, list[str]]:
    """trainrun's own options for the backend the line names, parsed as the CLI parses them (its errors, a
    UsageError, as one line), and the names to push; the cell itself is the program."""
    try:
        push, tokens = take_push(shlex.split(line))
    except ValueError as exc:
        raise CellError(f"trainrun: %%trainrun line = {line!r}: {exc} (valid: options as a shell splits them)")
    if not tokens or tokens[0] not in CELL_BACKENDS:
        raise CellError(f"trainrun: backend = {(tokens or [''])[0]!r}: %%trainrun needs a backend first "
                        f"(valid: one of {', '.join(CELL_BACKENDS)}, e.g. %%trainrun mpi -np 2)")
    program = ["--", "python", CELL_FILENAME]
    args = build_parser(tokens[0]).parse_args([*tokens, *program])
    if args.command != program:
        raise CellError(f"trainrun: command = {shlex.join(args.command[:-3])!r}: the cell is the program "
                        f"(valid: {tokens[0]}'s options only; a script runs with `!trainrun ...`)")
    return args, push


def one_line_configure(lines: list[str]) -> list[str]:
    """An input transformer: a `%%configure` cell that is its first line alone runs as the line magic
    `%configure`, as `%%configure --template NAME` reads naturally and needs no body."""
    if lines and ONE_LINE_CONFIGURE.match(lines[0]) and not "".join(lines[1:]).strip():
        return [lines[0][1:]]
    return lines


def in_pool_session(job: SparkJob, spark: NotebookSpark) -> SparkJob:
    """`%%trainrun spark` in a notebook attached to a pool runs on the pool: without a master, template, conf or
    --local-mode of its own, in the notebook's session (on the pool's executors, as TorchDistributor does), else
    with the pool's master; elsewhere as the CLI runs it."""
    master = pool_master()
    if master is None or job.master is not None or job.local_mode:
        return job
    if job.template or job.conf:
        return dataclasses.replace(job, master=master)
    return dataclasses.replace(job, session=spark.session_for_job())


@magics_class
class TrainrunMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.spark = NotebookSpark(shell)
        if one_line_configure not in shell.input_transformers_cleanup:
            shell.input_transformers_cleanup.append(one_line_configure)

    @cell_magic
    def trainrun(self, line: str, cell: str) -> Any:
        """%%trainrun mpi|torch|spark [trainrun's options] [--push NAME[,NAME...]]: runs the cell on every rank,
        streams each rank's output into the cell, and returns rank 0's value of the cell's last expression.
        In a notebook attached to a pool, `spark` runs on the pool. Bad input and a failed job raise the TrainrunError
        the CLI prints, which the cell shows as the same one line."""
        args, push = parse_cell_options(line)
        try:
            compile_cell(cell)
        except SyntaxError as exc:
            raise CellError(f"SyntaxError: {exc.msg} (line {exc.lineno} of the cell); nothing was started") from None
        missing = [name for name in push if name not in self.shell.user_ns]
        if missing:
            raise CellError(f"trainrun: {PUSH_OPTION} = {','.join(missing)!r}: not defined in this notebook "
                            "(valid: names of variables defined in an earlier cell)")
        pushed = {name: self.shell.user_ns[name] for name in push}
        from ..api import run_in_job

        job: MpiJob | TorchJob | SparkJob = job_from_args(args)
        if isinstance(job, SparkJob):
            job = in_pool_session(job, self.spark)
        if args.dry_run:
            sys.stdout.write(plan_text(plan_job(job, detect_machine(args.backend)), args.json))
            return None
        # What the CLI says before a job (such as the master Spark runs on), from the plan that runs.
        return run_in_job(job, args.backend, run_cell, (cell, pushed), before_run=announce)

    @line_cell_magic
    def configure(self, line: str, cell: str | None = None) -> None:
        """%%configure [-f] with a Livy session JSON body, or %configure [-f] --template NAME [--set KEY=VALUE ...]
        (a line magic: the line alone): the notebook's Spark session, checked with the templates' rules. It
        replaces the configuration in force; with a session running, -f stops it and starts one with the new
        configuration; --dry-run prints the session's plan and applies nothing."""
        self.spark.configure(line, cell)
