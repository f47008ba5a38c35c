"""The error type of the host tooling, and the one way every invoke task reports errors."""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable

from pooltemplates import Problem, TemplateError

EXIT_CODE = 2


class TrainstackError(Exception):
    """An error the user can fix; its message says what and how. Tasks print it and exit non-zero."""


def bad_value(field: str, value: Any, rule: str, valid: str) -> TrainstackError:
    """Bad input, in the one format of the templates' problems: `field = value: rule (valid: ...)`."""
    return TrainstackError(str(Problem(field, value, rule, valid)))


def whole_number(option: str, text: str | int, minimum: int = 1) -> int:
    """An invoke option given as text (invoke converts none of them here, so a bad one is our error)."""
    if isinstance(text, int) or (isinstance(text, str) and text.strip().isdigit()):
        value = int(text)
        if value >= minimum:
            return value
    raise bad_value(option, text, "is not a whole number", f"a whole number >= {minimum}")


def reports_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    """An invoke task's errors (host tooling or template) become `error: MESSAGE` on stderr and exit code 2."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except (TrainstackError, TemplateError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(EXIT_CODE) from None

    return wrapper
