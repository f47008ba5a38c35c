"""The one error a multi-node request ends with: what went wrong and, for bad input, what would do."""
from __future__ import annotations

from typing import Any

from pooltemplates import Problem
from trainstack.errors import TrainstackError


class NodesError(TrainstackError):
    """The worker containers could not be made, read, used or removed; the message says why in one place."""

    @classmethod
    def bad_option(cls, option: str, value: Any, rule: str, valid: str) -> NodesError:
        return cls(str(Problem(option, value, rule, valid)))
