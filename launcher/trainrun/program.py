"""What every rank runs: a script, a module, a pickled function or a command, read from the command line and
checked on this host (the argv that starts a rank: trainrun.rank.env.rank_argv)."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import shutil
import sys
from dataclasses import dataclass
from typing import Literal, Sequence

from .errors import UsageError

Kind = Literal["script", "module", "payload", "exec"]
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")


@dataclass(frozen=True)
class Program:
    kind: Kind
    target: str
    args: tuple[str, ...] = ()
    interpreter: str | None = None  # the user's python for `mpi -- python train.py`

    def rank_args(self) -> list[str]:
        """Arguments for `python -m trainrun.rank` (torchrun's ranks, Spark tasks, function payloads); read back
        by program_from_rank_args."""
        flag = {"script": [], "module": ["-m"], "payload": ["--payload"]}[self.kind]
        return [*flag, self.target, *self.args]


def program_from_rank_args(args: Sequence[str]) -> Program:
    """The program of `python -m trainrun.rank ARGS`, as Program.rank_args wrote them: `-m module ARGS`,
    `--payload FILE RESULT` or `script ARGS`."""
    if args[0] == "-m":
        return Program("module", args[1], tuple(args[2:]))
    if args[0] == "--payload":
        return Program("payload", args[1], tuple(args[2:]))
    return Program("script", args[0], tuple(args[1:]))


def program_from_script_args(option: str, tokens: Sequence[str]) -> Program:
    """`script.py ARGS` or `-m module ARGS`, as torchrun takes them; a `python` in front is accepted (the
    ranks run under this launcher's Python)."""
    if len(tokens) > 1 and _PYTHON.match(os.path.basename(tokens[0])):
        tokens = tokens[1:]
    if not tokens:
        raise UsageError(option, "", valid="a script and its arguments after `--`, or `-m module ARGS`")
    if tokens[0] == "-m":
        if len(tokens) < 2:
            raise UsageError(option, "-m", valid="a module name after -m")
        return Program("module", tokens[1], tuple(tokens[2:]))
    if tokens[0].startswith("-"):
        raise UsageError(option, tokens[0], valid="a script path or -m module")
    return Program("script", tokens[0], tuple(tokens[1:]))


def program_from_command(option: str, command: Sequence[str]) -> Program:
    """A full command as mpirun takes it; `python script.py` and `python -m mod` run in-process."""
    if not command:
        raise UsageError(option, "", valid="a command after `--`, e.g. -- python train.py")
    if _PYTHON.match(os.path.basename(command[0])) and len(command) > 1:
        rest = command[1:]
        if rest[0] == "-m" and len(rest) > 1:
            return Program("module", rest[1], tuple(rest[2:]), interpreter=command[0])
        if not rest[0].startswith("-"):
            return Program("script", rest[0], tuple(rest[1:]), interpreter=command[0])
    return Program("exec", command[0], tuple(command[1:]))


def check_program_here(option: str, program: Program, cwd: str | None = None) -> None:
    """Refuses a script, module or command that is not on this host, before a launch that would fail in every rank.
    For ranks that run here only; a module is looked up only where the ranks run this Python (they may have
    another environment), without importing anything."""
    cwd = cwd or os.getcwd()
    if program.interpreter is not None and not _is_command(program.interpreter, cwd):
        raise UsageError(option, program.interpreter, "is not a command on this host",
                         valid=f"a Python on PATH that every rank runs, e.g. python3 or {sys.executable}")
    if program.kind == "script" and not os.path.isfile(os.path.join(cwd, program.target)):
        raise UsageError(option, program.target, "is not a file on this host",
                         valid=f"the path of a Python script, absolute or relative to {cwd}")
    if program.kind == "module" and _same_python(program.interpreter) and not module_found(program.target, cwd):
        raise UsageError(option, program.target, f"is not a module {sys.executable} finds",
                         valid=f"a module on its sys.path or under {cwd}, e.g. -m pkg.train")
    if program.kind == "exec" and not _is_command(program.target, cwd):
        raise UsageError(option, program.target, "is not a command on this host",
                         valid="an executable file, or a command on PATH")


def _is_command(command: str, cwd: str) -> bool:
    """A name on PATH, or a path (relative to cwd) to an executable file."""
    if os.sep in command:
        return os.access(os.path.join(cwd, command), os.X_OK)
    return shutil.which(command, path=os.environ.get("PATH")) is not None


def _same_python(interpreter: str | None) -> bool:
    if interpreter is None:
        return True
    found = shutil.which(interpreter)
    return found is not None and os.path.dirname(os.path.abspath(found)) == os.path.dirname(sys.executable)


def module_found(name: str, cwd: str) -> bool:
    """Whether `python -m name`, started in `cwd`, finds the module: its packages are looked up, not imported."""
    top, *rest = name.split(".")
    path = [cwd, *sys.path[1:]]
    try:
        spec = importlib.machinery.PathFinder.find_spec(top, path) or importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    for depth, part in enumerate(rest, start=1):
        if spec is None or not spec.submodule_search_locations:
            return False
        spec = importlib.machinery.PathFinder.find_spec(".".join([top, *rest[:depth]]),
                                                       list(spec.submodule_search_locations))
    return spec is not None
