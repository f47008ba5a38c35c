"""A Plan is everything a launch does: one argv, the env it adds, the Spark conf it applies, and how trainrun runs
it (when it stops the job, how it shows its output)."""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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


@dataclass(frozen=True)
class Plan:
    backend: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    spark_conf: dict[str, str] = field(default_factory=dict)
    ranks: int = 1  # the processes the job starts (the most, for an elastic job)
    run: RunOptions = RunOptions()
    # Ranks on other hosts over ssh: checked before the launch, swept at its end (trainrun.remote).
    remote: "RemoteHosts | None" = None

    def to_dict(self) -> dict:
        plan = {"backend": self.backend, "ranks": self.ranks, "argv": list(self.argv),
                "env": dict(sorted(self.env.items())), "spark_conf": dict(sorted(self.spark_conf.items())),
                "timeout": self.run.timeout, "exit_barrier_timeout": self.run.exit_barrier_timeout,
                "timestamp_output": self.run.timestamp_output, "verbose": self.run.verbose}
        if self.remote is not None:
            plan["remote"] = self.remote.to_dict()
        return plan

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def to_text(self) -> str:
        lines = [f"backend: {self.backend}", f"ranks: {self.ranks}", f"argv: {shlex.join(self.argv)}",
                 f"timeout: {f'{self.run.timeout:g}s' if self.run.timeout is not None else 'none'}",
                 f"exit barrier timeout: {self.run.exit_barrier_timeout:g}s",
                 f"timestamp output: {'yes' if self.run.timestamp_output else 'no'}", "env:"]
        lines += [f"  {k}={v}" for k, v in sorted(self.env.items())] or ["  (none)"]
        if self.spark_conf:
            lines.append("spark conf:")
            lines += [f"  {k}={v}" for k, v in sorted(self.spark_conf.items())]
        if self.remote is not None:
            hosts = ", ".join(f"{name}:{slots}" for name, slots in self.remote.hosts)
            lines.append(f"remote hosts: {hosts} (checked within {self.remote.check_seconds:g} s before the "
                         "launch, swept after a failure or a stop)")
            lines.append(f"ssh: {shlex.join(self.remote.ssh)} HOST COMMAND")
        return "\n".join(lines) + "\n"


def thread_env(machine: "Machine", local_ranks: int) -> dict[str, str]:
    """OMP_NUM_THREADS for each of `local_ranks` ranks on this machine: its share of the cores, unless the user
    set it (torchrun sets 1; ranks that share cores evenly lose nothing to oversubscribed thread pools)."""
    if "OMP_NUM_THREADS" in machine.environ:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, machine.cpu_count // max(1, local_ranks)))}
