"""`%%trainrun` runs a cell on N ranks through trainrun's plans and runner; `%%configure` sets the notebook's Spark
session as Synapse and sparkmagic do; `spark` and `sc` are made on first use."""
from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from IPython.core.magic import Magics, cell_magic, magics_class

from ..cli import build_parser, dry_run, job_from_args
from ..errors import TrainrunError
from .cell import CELL_FILENAME, compile_cell, run_cell
from .errors import CellError

CELL_BACKENDS = ("mpi", "torch", "spark")
PUSH_OPTION = "--push"
FORCE_OPTIONS = ("-f", "--force")


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
    """trainrun's own options for the backend the line names, parsed as the CLI parses them (its errors as one
    line), and the names to push; the cell itself is the program."""
    try:
        push, tokens = take_push(shlex.split(line))
    except ValueError as exc:
        raise CellError(f"trainrun: %%trainrun line = {line!r}: {exc} (valid: options as a shell splits them)")
    if not tokens or tokens[0] not in CELL_BACKENDS:
        raise CellError(f"trainrun: backend = {(tokens or [''])[0]!r}: %%trainrun needs a backend first "
                        f"(valid: one of {', '.join(CELL_BACKENDS)}, e.g. %%trainrun mpi -np 2)")
    program = ["--", "python", CELL_FILENAME]
    try:
        args = build_parser().parse_args([*tokens, *program])
    except TrainrunError as exc:
        raise CellError(f"trainrun: {exc}") from None
    if args.command != program:
        raise CellError(f"trainrun: command = {shlex.join(args.command[:-3])!r}: the cell is the program "
                        f"(valid: {tokens[0]}'s options only; a script runs with `!trainrun ...`)")
    return args, push


@magics_class
class TrainrunMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        from .session import NotebookSpark

        self.spark = NotebookSpark(shell)

    @cell_magic
    def trainrun(self, line: str, cell: str) -> Any:
        """%%trainrun mpi|torch|spark [trainrun's options] [--push NAME[,NAME...]]: runs the cell on every rank,
        streams each rank's output into the cell, and returns rank 0's value of the cell's last expression."""
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

        try:
            job = job_from_args(args)
            if args.dry_run:
                sys.stdout.write(dry_run(args, job))
                return None
            return run_in_job(job, args.backend, run_cell, (cell, pushed))
        except TrainrunError as exc:  # a failed job (JobFailed) or bad input: one line, as the CLI prints it
            raise CellError(f"trainrun: {exc}") from None

    @cell_magic
    def configure(self, line: str, cell: str) -> None:
        """%%configure [-f] with a Livy session JSON body, or %%configure [-f] --template NAME [--set KEY=VALUE ...]:
        the notebook's Spark session, checked with the templates' rules. The body replaces the configuration in
        force; with a session running, -f stops it and starts one with the new configuration."""
        self.spark.configure(line, cell)
