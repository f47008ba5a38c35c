"""The error type of the host tooling, and the one way every invoke task reports errors."""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable

from pooltemplates import TemplateError

EXIT_CODE = 2


class TrainstackError(Exception):
    """An error the user can fix; its message says what and how. Tasks print it and exit non-zero."""


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
