"""The one error a pool request ends with: what went wrong and, for bad input, what would do."""
from __future__ import annotations

from typing import Any

from pooltemplates import Problem
from trainstack.errors import TrainstackError


class PoolError(TrainstackError):
    """The pool could not be made, read or removed; the message says why in one place."""

    @classmethod
    def bad_option(cls, option: str, value: Any, rule: str, valid: str) -> PoolError:
        return cls(str(Problem(option, value, rule, valid)))
