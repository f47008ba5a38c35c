"""invoke's own command-line mistakes (a misspelled task or option, a missing argument) in the project's format:
one `error: ...` line naming what is wrong and what would be valid, with the closest name, and exit code 2.

invoke parses the tasks' command line after it has loaded tasks.py, with the Program that its `invoke` script
runs (invoke.main.program); tasks.py gives that Program this subclass, whose parse steps turn invoke's
ParseError into that line.
"""
from __future__ import annotations

import difflib
import re

import invoke.main
from invoke import Program
from invoke.exceptions import Exit, ParseError

from pooltemplates import Problem
from trainstack.console import EXIT_CODE

_UNKNOWN = re.compile(r"No idea what '(?P<token>.*)' is!")
_NO_VALUE = re.compile(r"Flag <Argument: (?P<name>[^ >(]+).*> needed value and was not given one!")


class TrainstackProgram(Program):
    def parse_tasks(self) -> None:
        try:
            super().parse_tasks()
        except ParseError as exc:
            raise Exit(f"error: {self.explain(exc)}", code=EXIT_CODE) from None

    def parse_cleanup(self) -> None:
        try:
            super().parse_cleanup()  # --help TASK
        except ParseError as exc:
            raise Exit(f"error: {self.explain(exc)}", code=EXIT_CODE) from None

    def explain(self, error: ParseError) -> str:
        context = error.context
        task = context.name if context is not None and context.name in self.collection.task_names else None
        unknown = _UNKNOWN.fullmatch(str(error))
        if unknown and unknown["token"].startswith("-") and task:
            return str(Problem(f"{task} option", unknown["token"], f"is not an option of `invoke {task}`",
                               _closest(unknown["token"].split("=")[0], list(context.flags),
                                        f"`invoke --help {task}` lists them")))
        if unknown:
            names = [name for primary, aliases in self.collection.task_names.items() for name in [primary, *aliases]]
            return str(Problem("task", unknown["token"], "is not a task",
                               _closest(unknown["token"], names, "`invoke --list` lists them")))
        no_value = _NO_VALUE.fullmatch(str(error))
        if no_value and task:
            return _needs_value(task, no_value["name"], "needs a value")
        missing = context.missing_positional_args if context is not None else []
        if missing and task:
            return "; ".join(_needs_value(task, argument.name, f"is required by `invoke {task}`")
                             for argument in missing)
        return str(error)


def _needs_value(task: str, name: str, rule: str) -> str:
    flag = "--" + name.replace("_", "-")
    return str(Problem(flag, "", rule, f"`invoke {task} {flag} VALUE`; `invoke --help {task}` says what it takes"))


def _closest(word: str, choices: list[str], listing: str) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f"{close[0]} (the closest); {listing}" if close else listing


def report_parse_errors() -> None:
    """Makes the running `invoke` report its command-line mistakes as TrainstackProgram does."""
    if type(invoke.main.program) is Program:
        invoke.main.program.__class__ = TrainstackProgram
