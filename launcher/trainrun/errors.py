"""The errors trainrun reports to users as one line and a non-zero exit code."""
from __future__ import annotations

import reprlib

# Longest value an error shows, as the templates' problems (pooltemplates.errors.MAX_SHOWN): a bad value can be
# a whole file. trainrun runs on hosts without pooltemplates, so `shown` is a twin of pooltemplates.errors.shown,
# pinned to it by tests/unit/launcher/test_bad_input.py.
MAX_SHOWN = 80
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = _SHORT_REPR.maxlong = MAX_SHOWN


def shown(value: object) -> str:
    """repr(value), cut to MAX_SHOWN characters."""
    text = _SHORT_REPR.repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 3] + "..."


class TrainrunError(Exception):
    exit_code = 2

    def _render_traceback_(self) -> list[str]:
        """What IPython shows of it in a notebook cell (trainrun.run, HorovodRunner): the one line the CLI prints,
        not trainrun's own frames (a failed rank's traceback is already in the cell's output)."""
        return [f"trainrun: {self}"]


class UsageError(TrainrunError):
    """A bad option value: names the option, the value and what would be valid, with the arguments and the format
    of the templates' problems (pooltemplates.Problem(field, value, rule, valid)): `option = value: rule (valid:
    ...)`. `valid` is keyword-only, so that a call in the old order (option, value, valid) fails loudly."""

    def __init__(self, option: str, value: object, rule: str = "is invalid", *, valid: str) -> None:
        super().__init__(f"{option} = {shown(value)}: {rule} (valid: {valid})")
        self.option = option
        self.value = value
        self.rule = rule
        self.valid = valid


class MissingBackend(TrainrunError):
    """A launcher or library the job needs is not installed."""

    exit_code = 127

    def __init__(self, what: str, install: str) -> None:
        super().__init__(f"{what} is not available: {install}")


class JobFailed(TrainrunError):
    """The job ended with a non-zero exit code; `rank` is None when no rank reported it; `signal` names the
    signal that killed that rank (or the launcher), e.g. "SIGKILL"."""

    def __init__(self, exit_code: int, reason: str, rank: int | None = None, signal: str | None = None) -> None:
        super().__init__(reason)
        self.exit_code = exit_code
        self.rank = rank
        self.signal = signal


class UnpicklableFunction(TrainrunError):
    """trainrun.run's function, an object it uses, or an argument cannot be pickled for the ranks."""
