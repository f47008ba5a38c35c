"""What tasks tell the user on stderr: a line per step of long work, and errors as `error: MESSAGE` with
exit code 2, so that stdout keeps only what a task returns."""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable

from pooltemplates import TemplateError
from trainstack.errors import TrainstackError

EXIT_CODE = 2


def report(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


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
