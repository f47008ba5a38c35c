"""The uniform rank environment: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE under every launcher, mapped
in Python (launcher_rank_env, for trainrun.rank.entry) and in sh (shell_rank_argv); rank_argv, the argv that
starts one rank of a program under mpirun, srun or Horovod's Gloo controller. A task srun started gets Slurm's
(trainrun.engines.slurm.step_rank_env), each where nothing else set it.

The sh entry runs ranks under mpirun and Horovod's Gloo controller that run a command (`python train.py`,
`python -m pkg.train`, `./run.sh`): export the uniform rank variables, run the command, and record a
non-zero exit code for this rank through trainrun.rank.status, so that trainrun names the rank.
A shell starts in about a millisecond; `python -m trainrun.rank` added runpy, typing and trainrun's own
imports to the start of every rank.
"""
from __future__ import annotations

import shlex
from typing import Mapping

from ..program import Program
from ..engines.slurm import OTHER_LAUNCHERS, STEP_TASKS, step_rank_env
from .status import STATUS_DIR

# Each rank entry's pid, exported for everything the rank starts (trainrun.proctree finds leftovers by it).
RANK_ENTRY = "TRAINRUN_RANK_ENTRY"

# Set by --verbose: ranks and launchers show their whole tracebacks, trainrun's and torchrun's frames included.
VERBOSE = "TRAINRUN_VERBOSE"
# Set by --ranks-filter: the ranks whose output is shown ("0" or "0,2"); the others' goes to /dev/null.
SHOW_RANKS = "TRAINRUN_SHOW_RANKS"
# First match wins: Open MPI, MPICH/Hydra (PMI), then Horovod's Gloo launcher. torchrun sets the targets itself.
SOURCES = {
    "RANK": ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "HOROVOD_RANK"),
    "WORLD_SIZE": ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "HOROVOD_SIZE"),
    "LOCAL_RANK": ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "HOROVOD_LOCAL_RANK"),
    "LOCAL_WORLD_SIZE": ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "HOROVOD_LOCAL_SIZE"),
}


def launcher_rank_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The uniform names mapped from the launcher's own variables, then Slurm's where they left one unset (a task
    srun started); empty under torchrun."""
    mapped = {}
    for name, sources in SOURCES.items():
        for source in sources:
            if source in environ:
                mapped[name] = environ[source]
                break
    return {**step_rank_env({**environ, **mapped}), **mapped}


def output_shown(environ: Mapping[str, str]) -> bool:
    """Whether this rank's output is shown under --ranks-filter (always, without one)."""
    shown = environ.get(SHOW_RANKS)
    return shown is None or environ.get("RANK", "") in shown.split(",")


def _export(name: str, sources: tuple[str, ...]) -> str:
    """`export NAME=<the first of sources that is set>`, only when one is set, as launcher_rank_env maps."""
    value = f"${sources[-1]}"
    for source in reversed(sources[:-1]):
        value = f"${{{source}-{value}}}"
    any_set = "".join(f"${{{source}+x}}" for source in sources)
    return f'[ -n "{any_set}" ] && export {name}="{value}"'


def shell_rank_script(python: str) -> str:
    """Exports the rank variables and this entry's tag (trainrun.proctree.RANK_ENTRY: its pid, inherited by
    everything the rank starts), silences a rank --ranks-filter leaves out (as output_shown decides), records
    the start, runs "$@", then ends the rank: processes tagged with this entry that still run are leftovers
    (found by `grep` over /proc/*/environ, a millisecond) and go, and the end is recorded. A success with no
    leftovers is recorded with shell builtins; a failure or leftovers run `python -m trainrun.rank.status`
    (the one writer of failure records), so Python starts only then."""
    status = f'${{{STATUS_DIR}-}}'
    rank_file = '${RANK:-unknown}'
    start = f'[ -d "{status}" ] && echo $$ > "{status}/start-{rank_file}"'
    leftovers = f'left=$({RANK_ENTRY}= grep -lsxzF "{RANK_ENTRY}=$$" /proc/[0-9]*/environ)'
    end = (f'if [ "$code" -ne 0 ] || [ -n "$left" ]; then {shlex.quote(python)} -m trainrun.rank.status '
           f'--entry $$ --shell "$code"; elif [ -d "{status}" ]; then '
           f'printf \'{{"rank": "%s", "exit_code": 0, "signal": null, "pid": %s}}\\n\' "${{RANK-}}" $$ '
           f'> "{status}/rank-{rank_file}.json"; fi')
    # As step_rank_env, for the names a shell can map without expanding Slurm's lists (the image's Python maps the rest
    # as it starts: images/site-packages/trainstack_slurm_ranks.py).
    others = "".join(f"${{{name}+x}}" for name in OTHER_LAUNCHERS)
    slurm = (f'[ -n "${{{STEP_TASKS}+x}}" ] && [ -z "{others}" ] && '
             f': "${{RANK=$SLURM_PROCID}}" "${{WORLD_SIZE=${STEP_TASKS}}}" "${{LOCAL_RANK=$SLURM_LOCALID}}" '
             '"${NODE_RANK=$SLURM_NODEID}" && export RANK WORLD_SIZE LOCAL_RANK NODE_RANK')
    silence = f'case ",${{{SHOW_RANKS}-${{RANK-}}}}," in *",${{RANK-}},"*) ;; *) exec >/dev/null 2>&1 ;; esac'
    return "; ".join([
        *(_export(name, sources) for name, sources in SOURCES.items()), slurm, silence, f"export {RANK_ENTRY}=$$", start,
        '"$@"', "code=$?", leftovers, end, 'exit "$code"',
    ])


def shell_rank_argv(command: list[str], python: str) -> list[str]:
    return ["sh", "-c", shell_rank_script(python), "trainrun-rank", *command]


def rank_argv(program: Program, python: str) -> list[str]:
    """One rank of `program` under mpirun or Horovod's Gloo controller: a function payload needs trainrun.rank,
    anything else runs as a command under the sh entry."""
    if program.kind == "payload":
        return [python, "-m", "trainrun.rank", *program.rank_args()]
    interpreter = program.interpreter or python
    head = {"script": [interpreter], "module": [interpreter, "-m"], "exec": []}[program.kind]
    return shell_rank_argv([*head, program.target, *program.args], python)
