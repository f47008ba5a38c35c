"""The `invoke` tasks' reference page from the collection tasks.py builds: every task with its docstring and each
option with its short flag, default and help."""
from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

from invoke import Collection, Task

from trainstack.image.docs import markdown_table


def load_collection(tasks_file: Path) -> Collection:
    """The collection `invoke` finds in tasks_file (its `ns`)."""
    spec = importlib.util.spec_from_file_location("tasks", tasks_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ns


def _tasks(collection: Collection, prefix: str = "") -> list[tuple[str, Task]]:
    found = [(prefix + name, task) for name, task in sorted(collection.tasks.items())]
    for name, sub in sorted(collection.collections.items()):
        found += _tasks(sub, f"{prefix}{name}.")
    return found


def _default(value: object) -> str:
    return "" if value in (None, False, [], "") else f"`{value}`"


def _option_rows(task: Task) -> list[list[str]]:
    rows = []
    for argument in task.get_arguments():
        long, *short = argument.names
        value = "" if argument.kind is bool else " VALUE"
        names = f"`--{long}{value}`" + "".join(f", `-{flag}`" for flag in short)
        if argument.kind is list and "repeatable" not in (argument.help or ""):
            names += " (repeatable)"
        rows.append([names, _default(argument.default), " ".join((argument.help or "").split())])
    return rows


def task_reference(collection: Collection, intro: str) -> str:
    """The page: one section per task (`(invoke-NAME)=` targets, dots as dashes), in the order `invoke --list`
    gives."""
    lines = ["(invoke-tasks)=", "# invoke tasks", "", intro, ""]
    for name, task in _tasks(collection):
        anchor = "invoke-" + name.replace(".", "-")
        lines += [f"({anchor})=", f"## `invoke {name}`", ""]
        lines += [inspect.cleandoc(task.__doc__ or ""), ""]
        rows = _option_rows(task)
        if rows:
            lines += [markdown_table(["option", "default", "what it does"], rows), ""]
    return "\n".join(lines).rstrip() + "\n"
