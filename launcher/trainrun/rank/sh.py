"""The sh entry of ranks under mpirun and Horovod's Gloo controller that run a command (`python train.py`,
`python -m pkg.train`, `./run.sh`): export the uniform rank variables, run the command, and record a
non-zero exit code for this rank through trainrun.rank.status, so that trainrun names the rank.

A shell starts in about a millisecond; `python -m trainrun.rank` added runpy, typing and trainrun's own
imports to the start of every rank.
"""
from __future__ import annotations

import shlex

from .env import SOURCES
from .status import STATUS_DIR


def _export(name: str, sources: tuple[str, ...]) -> str:
    """`export NAME=<the first of sources that is set>`, only when one is set, as launcher_rank_env maps."""
    value = f"${sources[-1]}"
    for source in reversed(sources[:-1]):
        value = f"${{{source}-{value}}}"
    any_set = "".join(f"${{{source}+x}}" for source in sources)
    return f'[ -n "{any_set}" ] && export {name}="{value}"'


def shell_rank_script(python: str) -> str:
    """Exports the rank variables, runs "$@", and on failure records it with `python -m trainrun.rank.status`
    (the one writer of status records; Python starts only when a rank has failed)."""
    record = f'[ -d "${{{STATUS_DIR}-}}" ] && {shlex.quote(python)} -m trainrun.rank.status "$code"'
    return "; ".join([
        *(_export(name, sources) for name, sources in SOURCES.items()),
        '"$@"', "code=$?", f'if [ "$code" -ne 0 ]; then {record}; fi', 'exit "$code"',
    ])


def shell_rank_argv(command: list[str], python: str) -> list[str]:
    return ["sh", "-c", shell_rank_script(python), "trainrun-rank", *command]
