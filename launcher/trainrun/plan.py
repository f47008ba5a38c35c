"""A Plan is everything a launch does: the process it starts (or the Spark stage it runs in this process), the env it
adds, the Spark conf it applies, and how trainrun runs it (when it stops the job, how it shows its output)."""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from .rank.env import VERBOSE

if TYPE_CHECKING:
    from .machine import Machine
    from .remote import RemoteHosts


# torchrun's elastic agent waits this long at its exit barrier.
DEFAULT_EXIT_BARRIER_TIMEOUT = 300.0


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How trainrun runs a job, whatever its backend: a job carries them, its plan holds them, the runner
    applies them (trainrun.runner, trainrun.lifecycle)."""

    timeout: float | None = None  # stop the whole job after this many seconds (exit 124)
    # Once a rank has exited 0, how long the others have to exit before the job is stopped.
    exit_barrier_timeout: float = DEFAULT_EXIT_BARRIER_TIMEOUT
    timestamp_output: bool = False  # prefix each output line with the time it arrived (trainrun.output)
    # Tracebacks keep the frames of trainrun, torchrun and the JVM (the ranks read TRAINRUN_VERBOSE from the
    # plan's env); the plan is printed before the launch; a Spark job shows Spark's own log lines.
    verbose: bool = False


# How a launcher marks each line of output with its rank: not at all; once per line (torchrun's --tee, MPICH's
# -prepend-rank, horovodrun, trainrun spark); or on every piece a rank writes (Open MPI's --tag-output), which the
# runner joins into whole lines (trainrun.output.TaggedLines).
OutputTags = Literal["none", "lines", "pieces"]


class Stage(Protocol):
    """What a plan runs in this process instead of starting one: the Spark backend's BarrierStage, a barrier stage
    in the caller's SparkSession (trainrun.run(spark=session)). The plan and the runner know a stage only by this,
    so that no module at or below the plan names a backend."""

    def run(self, run: RunOptions) -> None:
        """Runs the stage here, applying `run` itself (the exit barrier, the timeout); raises JobFailed as
        trainrun's runner does."""

    def to_dict(self) -> dict:
        """The stage as the plan's JSON shows it (`--dry-run --json`)."""

    def to_text(self) -> str:
        """The stage in one line, as the plan's text shows it."""


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What one launch does, filled in by the backend's planner, which knows every fact of it: nothing here is
    read back out of `argv`."""

    backend: str
    # The process trainrun's runner starts (empty for a stage), or for a notebook's Spark session the spark-submit
    # that PySpark starts with PYSPARK_SUBMIT_ARGS (trainrun.notebook.session).
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    spark_conf: dict[str, str] = field(default_factory=dict)
    ranks: int = 1  # the processes the job starts (the most, for an elastic job)
    # The ranks this host starts from its own files (0 when all run on other hosts or on Spark executors elsewhere):
    # what the program is checked against here, and what shares this host's cores.
    local_ranks: int = 0
    launcher: str = "the launcher"  # what trainrun's messages call the process it starts: mpirun, torchrun, ...
    output_tags: OutputTags = "none"
    master: str | None = None  # a Spark job's master URL
    notes: tuple[str, ...] = ()  # what trainrun says before it starts the job, e.g. which master Spark runs on
    run: RunOptions = RunOptions()
    # Ranks on other hosts over ssh: checked before the launch, swept at its end (trainrun.remote).
    remote: "RemoteHosts | None" = None
    # trainrun.run(spark=session): no process starts; this barrier stage runs in the caller's SparkSession, in this
    # process (it applies `run` itself).
    stage: "Stage | None" = None
    # A folder every node sees, for the ranks' status records (trainrun.rank.status), where ranks run on nodes whose
    # /tmp is their own (a Slurm job's); None: this host's temporary folder.
    status_parent: str | None = None
    # The image every rank runs in, from its files rather than this host's (trainrun.containers).
    container_image: str | None = None

    def ranks_start_here(self) -> bool:
        """Whether every rank starts on this host, from its files: none on other hosts over ssh, on Spark executors
        elsewhere or in an image."""
        return self.remote is None and self.local_ranks > 0 and self.container_image is None

    def to_dict(self) -> dict:
        plan: dict = {"backend": self.backend, "launcher": self.launcher, "ranks": self.ranks,
                      "local_ranks": self.local_ranks}
        if self.stage is not None:
            plan["stage"] = self.stage.to_dict()
        else:
            plan["argv"] = list(self.argv)
        plan |= {"env": dict(sorted(self.env.items())), "spark_conf": dict(sorted(self.spark_conf.items())),
                 "output_tags": self.output_tags, "timeout": self.run.timeout,
                 "exit_barrier_timeout": self.run.exit_barrier_timeout,
                 "timestamp_output": self.run.timestamp_output, "verbose": self.run.verbose}
        if self.master is not None:
            plan["master"] = self.master
        if self.stage is not None:
            plan["session"] = IN_SESSION
        if self.notes:
            plan["notes"] = list(self.notes)
        if self.remote is not None:
            plan["remote"] = self.remote.to_dict()
        if self.status_parent is not None:
            plan["status_parent"] = self.status_parent
        if self.container_image is not None:
            plan["container_image"] = self.container_image
        return plan

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def to_text(self) -> str:
        lines = [f"backend: {self.backend}", f"launcher: {self.launcher}",
                 f"ranks: {self.ranks} ({self.local_ranks} on this host)"]
        if self.master is not None:
            lines.append(f"master: {self.master}")
        if self.stage is not None:
            lines += [f"session: {IN_SESSION}", f"stage: {self.stage.to_text()}"]
        else:
            lines.append(f"argv: {shlex.join(self.argv)}")
        lines += [f"timeout: {f'{self.run.timeout:g}s' if self.run.timeout is not None else 'none'}",
                  f"exit barrier timeout: {self.run.exit_barrier_timeout:g}s",
                  f"output tags: {OUTPUT_TAGS_SHOWN[self.output_tags]}",
                  f"timestamp output: {'yes' if self.run.timestamp_output else 'no'}",
                  f"verbose: {'yes' if self.run.verbose else 'no'}", "env:"]
        lines += [f"  {k}={v}" for k, v in sorted(self.env.items())] or ["  (none)"]
        if self.spark_conf:
            lines.append("spark conf:")
            lines += [f"  {k}={v}" for k, v in sorted(self.spark_conf.items())]
        if self.remote is not None:
            hosts = ", ".join(f"{name}:{slots}" for name, slots in self.remote.hosts)
            lines.append(f"remote hosts: {hosts} (checked within {self.remote.check_seconds:g} s before the "
                         "launch, swept after a failure or a stop)")
            lines.append(f"ssh: {shlex.join(self.remote.ssh)} HOST COMMAND")
        if self.status_parent is not None:
            lines.append(f"rank status records under: {self.status_parent}")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines) + "\n"


IN_SESSION = "the caller's SparkSession, in this process"
OUTPUT_TAGS_SHOWN = {"none": "none", "lines": "each line with its rank",
                     "pieces": "each piece with its rank (joined into lines)"}


def run_env(run: RunOptions) -> dict[str, str]:
    """What every planner puts in every rank's env for the run options: TRAINRUN_VERBOSE with --verbose (the ranks,
    trainrun.rank.entry and trainrun.torchrun, then keep their whole tracebacks)."""
    return {VERBOSE: "1"} if run.verbose else {}


def thread_env(machine: "Machine", local_ranks: int) -> dict[str, str]:
    """OMP_NUM_THREADS for each of `local_ranks` ranks on this machine: its share of the cores, unless the user
    set it (torchrun sets 1; ranks that share cores evenly lose nothing to oversubscribed thread pools)."""
    if "OMP_NUM_THREADS" in machine.environ:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, machine.cpu_count // max(1, local_ranks)))}
