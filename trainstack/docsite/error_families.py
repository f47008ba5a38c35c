"""The error message families the code can raise, found in its source: a family is one error class raised by one
module (`launcher/trainrun/remote.py UsageError`). The error catalogue (docs/reference/errors.md) names the families
each of its entries explains in a `{raised-by}` block; a test and the docs build check that every family has an
entry and that no entry names a family the code no longer raises.

The classes are the user-facing error types and their subclasses, found by their `class` statements; a family's
messages are the texts of the calls that make the error (or the pooltemplates `Problem`s its module lists)."""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

# Where the code that prints errors to users lives: trainrun, pooltemplates, the host tooling (tasks, build, pool)
# and the scripts the image build runs.
SOURCE_TREES = ("launcher/trainrun", "templates/pooltemplates", "trainstack", "images/scripts")
# The error types users see, each printed as one message: every subclass of these is a type of its own.
ROOT_ERRORS = ("TrainrunError", "CellError", "TemplateError", "TemplateWarning", "TrainstackError", "ToolkitError")
# Messages in the templates' problem format, `field = value: rule (valid: ...)`: the call's field, rule and valid
# arguments by position (valid may be the keyword `valid`).
PROBLEM_FORMAT = ("Problem", "UsageError", "bad_option", "bad_value")
RAISED_BY = re.compile(r"^```\{raised-by\}\s*\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True, order=True)
class Family:
    path: str  # the raising module, relative to the repository
    error: str  # the error class

    def __str__(self) -> str:
        return f"{self.path} {self.error}"


def _sources(repo: Path) -> Iterator[tuple[str, ast.Module]]:
    for tree in SOURCE_TREES:
        for path in sorted((repo / tree).rglob("*.py")):
            yield path.relative_to(repo).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _base_names(node: ast.ClassDef) -> list[str]:
    return [base.id if isinstance(base, ast.Name) else base.attr for base in node.bases
            if isinstance(base, (ast.Name, ast.Attribute))]


def error_classes(modules: list[tuple[str, ast.Module]]) -> set[str]:
    """The root errors and every class deriving from one, by name."""
    bases = {node.name: _base_names(node) for _, module in modules for node in ast.walk(module)
             if isinstance(node, ast.ClassDef)}
    found = set(ROOT_ERRORS)
    while True:
        more = {name for name, parents in bases.items() if name not in found and set(parents) & found}
        if not more:
            return found
        found |= more


def _aliases(modules: list[tuple[str, ast.Module]], classes: set[str]) -> dict[str, str]:
    """Module-level names bound to an error's constructor (`bad_value = TrainstackError.bad_option`)."""
    aliases = {}
    for _, module in modules:
        for node in module.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute)
                    and isinstance(node.value.value, ast.Name) and node.value.value.id in classes):
                aliases.update({target.id: node.value.value.id for target in node.targets
                                if isinstance(target, ast.Name)})
    return aliases


def _raised_class(call: ast.Call, classes: set[str], aliases: dict[str, str]) -> str | None:
    """The error class a call makes: `Error(...)`, `Error.bad_option(...)` or an alias of one."""
    function = call.func
    if isinstance(function, ast.Name):
        return function.id if function.id in classes else aliases.get(function.id)
    if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name) and function.attr == "bad_option":
        return function.value.id if function.value.id in classes else None
    return None


def _calls(modules: list[tuple[str, ast.Module]]) -> Iterator[tuple[str, str | None, ast.Call]]:
    classes = error_classes(modules)
    aliases = _aliases(modules, classes)
    for path, module in modules:
        for node in ast.walk(module):
            if isinstance(node, ast.Call):
                yield path, _raised_class(node, classes, aliases), node


def error_families(repo: Path) -> set[Family]:
    """Every (module, error class) pair where the code makes a user-facing error."""
    return {Family(path, error) for path, error, _ in _calls(list(_sources(repo))) if error is not None}


def _text(node: ast.expr | None) -> str:
    """A message argument as text: literal parts as they are, computed parts as {expression}."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(str(part.value) if isinstance(part, ast.Constant) else "{" + ast.unparse(part.value) + "}"
                       for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left) + _text(node.right)
    return "{" + ast.unparse(node) + "}"


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _message(call: ast.Call) -> str | None:
    name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
    if name in PROBLEM_FORMAT and len(call.args) >= 2:
        args = list(call.args) + [None] * 4
        keywords = {keyword.arg: keyword.value for keyword in call.keywords}
        valid = keywords.get("valid", args[3])
        rule = _text(keywords.get("rule", args[2])) or "is invalid"  # UsageError's default rule
        return f"{_text(args[0])} = …: {rule} (valid: {_text(valid)})"
    texts = [_text(arg) for arg in call.args if _is_text(arg)]
    return ": ".join(texts) if texts else None


def family_messages(repo: Path) -> dict[Family, list[str]]:
    """Each family's message patterns, in source order: the texts of its calls and, for template errors, of the
    Problems its module makes."""
    modules = list(_sources(repo))
    messages: dict[Family, list[str]] = defaultdict(list)
    problems: dict[str, list[str]] = defaultdict(list)
    for path, error, call in _calls(modules):
        if isinstance(call.func, ast.Name) and call.func.id == "Problem":
            problems[path].append(_message(call) or "")
        elif error is not None:
            text = _message(call)
            messages[Family(path, error)] += [text] if text else []
    for family in list(messages):
        if family.error == "TemplateError":
            messages[family] += problems[family.path]
    return {family: list(dict.fromkeys(texts)) for family, texts in messages.items()}


def catalogued_families(catalogue: str) -> dict[Family, int]:
    """The families a catalogue page's `{raised-by}` blocks name, with the line of each."""
    found = {}
    for block in RAISED_BY.finditer(catalogue):
        first_line = catalogue.count("\n", 0, block.start(1)) + 1
        for offset, line in enumerate(block.group(1).splitlines()):
            if line.strip():
                path, error = line.split()
                found[Family(path, error)] = first_line + offset
    return found
