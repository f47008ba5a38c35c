"""The errors trainrun reports to users as one line and a non-zero exit code."""


class TrainrunError(Exception):
    exit_code = 2


class UsageError(TrainrunError):
    """A bad option value: names the option, the value and what would be valid, in the format of the
    templates' problems (pooltemplates.Problem): `option = value: rule (valid: ...)`."""

    def __init__(self, option: str, value: object, valid: str, rule: str = "is invalid") -> None:
        super().__init__(f"{option} = {value!r}: {rule} (valid: {valid})")
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
