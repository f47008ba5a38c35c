"""The sh entry of ranks under mpirun and Horovod's Gloo controller that run a command (`python train.py`,
`python -m pkg.train`, `./run.sh`): export the uniform rank variables, run the command, and record a
non-zero exit code for this rank as trainrun.rank does, so that trainrun names the rank.

A shell starts in about a millisecond; `python -m trainrun.rank` added runpy, typing and trainrun's own
imports to the start of every rank.
"""
from __future__ import annotations

from .status import STATUS_DIR
from .env import SOURCES


def _export(name: str, sources: tuple[str, ...]) -> str:
    """`export NAME=<the first of sources that is set>`, only when one is set, as launcher_rank_env maps."""
    value = f"${sources[-1]}"
    for source in reversed(sources[:-1]):
        value = f"${{{source}-{value}}}"
    any_set = "".join(f"${{{source}+x}}" for source in sources)
    return f'[ -n "{any_set}" ] && export {name}="{value}"'


# Sub-second times keep "the first rank that failed" right; `date` without %N falls back to seconds.
_RECORD = (
    f'if [ -d "${{{STATUS_DIR}-}}" ]; then case ${{RANK-}} in ""|*[!0-9]*) r=null;; *) r=$RANK;; esac; '
    "t=$(date +%s.%N); case $t in *[!0-9.]*) t=$(date +%s);; esac; "
    f'f="${STATUS_DIR}/rank-${{RANK:-unknown}}.json"; '
    """printf '{"rank": %s, "exit_code": %s, "time": %s}\\n' "$r" "$code" "$t" >"$f.tmp" && mv -f "$f.tmp" "$f"; fi"""
)
SCRIPT = "; ".join([
    *(_export(name, sources) for name, sources in SOURCES.items()),
    '"$@"', "code=$?", f'if [ "$code" -ne 0 ]; then {_RECORD}; fi', 'exit "$code"',
])


def shell_rank_argv(command: list[str]) -> list[str]:
    return ["sh", "-c", SCRIPT, "trainrun-rank", *command]
