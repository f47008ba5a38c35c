"""The one error a pool request ends with: what went wrong and, for bad input, what would do."""
from __future__ import annotations

from trainstack.errors import TrainstackError


class PoolError(TrainstackError):
    """The pool could not be made, read or removed; the message says why in one place.

    Bad input: PoolError.bad_option(option, value, rule, valid)."""
