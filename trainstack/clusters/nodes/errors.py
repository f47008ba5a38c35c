"""The one error a multi-node request ends with: what went wrong and, for bad input, what would do."""
from __future__ import annotations

from trainstack.errors import TrainstackError


class NodesError(TrainstackError):
    """The worker containers could not be made, read, used or removed; the message says why in one place.

    Bad input: NodesError.bad_option(option, value, rule, valid)."""
