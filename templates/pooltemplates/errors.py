"""Problems found in a template, and the exception and warning that carry them."""
from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any, Iterable

# Longest value an error shows: a bad value can be a whole file, or a YAML alias bomb's billions of items.
MAX_SHOWN = 80
# reprlib stops walking a nested value early, so showing a huge one costs no more than a short one.
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = _SHORT_REPR.maxlong = MAX_SHOWN


def shown(value: Any) -> str:
    """repr(value), cut to MAX_SHOWN characters."""
    text = _SHORT_REPR.repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


@dataclass(frozen=True)
class Problem:
    """One broken (or suspicious) setting: where it is, what it holds, which rule, what would do."""

    field: str
    value: Any
    rule: str
    valid: str

    def __str__(self) -> str:
        return f"{self.field} = {shown(self.value)}: {self.rule} (valid: {self.valid})"


class TemplateError(ValueError):
    """A template, an override or a render request breaks one or more rules; all are listed."""

    def __init__(self, subject: str, problems: Iterable[Problem]) -> None:
        self.subject = subject
        self.problems = tuple(problems)
        count = len(self.problems)
        lines = [f"{subject}: {count} error{'s' if count != 1 else ''}"]
        lines += [f"  - {problem}" for problem in self.problems]
        super().__init__("\n".join(lines))


class TemplateWarning(UserWarning):
    """A setting that works but probably not as meant (e.g. a GPU reserve in bytes)."""

    def __init__(self, subject: str, problem: Problem) -> None:
        self.subject = subject
        self.problem = problem
        super().__init__(f"{subject}: {problem}")
