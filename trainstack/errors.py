"""The error type of the host tooling and the checks of option values that raise it."""
from __future__ import annotations

from typing import Any, Self

from pooltemplates import Problem


class TrainstackError(Exception):
    """An error the user can fix; its message says what and how. Tasks print it and exit non-zero."""

    @classmethod
    def bad_option(cls, field: str, value: Any, rule: str, valid: str) -> Self:
        """Bad input, in the one format of the templates' problems: `field = value: rule (valid: ...)`,
        the value cut at pooltemplates.MAX_SHOWN; a subclass (ClusterError) makes its own type."""
        return cls(str(Problem(field, value, rule, valid)))


# The same check for callers with no error type of their own.
bad_value = TrainstackError.bad_option


def whole_number(option: str, text: str | int, minimum: int = 1) -> int:
    """An invoke option given as text (invoke converts none of them here, so a bad one is our error)."""
    if isinstance(text, int) or (isinstance(text, str) and text.strip().isdigit()):
        value = int(text)
        if value >= minimum:
            return value
    raise bad_value(option, text, "is not a whole number", f"a whole number >= {minimum}")
