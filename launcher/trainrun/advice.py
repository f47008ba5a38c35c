"""Warnings about a launch that runs, but probably not as meant: a misspelled TRAINRUN_* variable (silently
ignored otherwise) and many more ranks than this host has cores."""
from __future__ import annotations

from typing import Mapping

from .proctree import JOB_ID
from .rank.env import RANK_ENTRY, SHOW_RANKS, VERBOSE
from .rank.status import STATUS_DIR, TASK_DIR
from .remote import IDENTITY_ENV, KNOWN_HOSTS_ENV, PORT_ENV

# The variables a user sets for trainrun; the others trainrun sets for the processes of a job (a trainrun started
# inside a rank sees them).
USER_VARIABLES = (PORT_ENV, IDENTITY_ENV, KNOWN_HOSTS_ENV)
JOB_VARIABLES = (JOB_ID, RANK_ENTRY, SHOW_RANKS, VERBOSE, STATUS_DIR, TASK_DIR)
# Ranks per core beyond which a job on one host mostly waits for the CPU (and collective timeouts may fire).
MAX_RANKS_PER_CORE = 4


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A warning for each TRAINRUN_* variable trainrun does not read, naming the closest one it does."""
    warnings = []
    for name in sorted(environ):
        if not name.startswith("TRAINRUN_") or name in USER_VARIABLES or name in JOB_VARIABLES:
            continue
        import difflib  # only for a misspelled variable: not every launch's cost

        close = difflib.get_close_matches(name, USER_VARIABLES, n=1)
        rule = "is not a variable trainrun reads" + (f"; did you mean {close[0]}?" if close else "")
        warnings.append(f"{name} = {environ[name]!r}: {rule} (valid: {', '.join(USER_VARIABLES)})")
    return warnings


def oversubscription(local_ranks: int, cores: int) -> str | None:
    if local_ranks <= MAX_RANKS_PER_CORE * cores:
        return None
    return (f"{local_ranks} ranks on this host's {cores} core{'s' if cores != 1 else ''} ({local_ranks / cores:g} "
            f"per core): each runs a fraction of the time, and collective timeouts may fire (valid: at most "
            f"{MAX_RANKS_PER_CORE * cores} here, or more hosts)")
