"""A Plan is everything a launch does: one argv, the env it adds, and the Spark conf it applies."""
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


@dataclass(frozen=True)
class Plan:
    backend: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    spark_conf: dict[str, str] = field(default_factory=dict)
    ranks: int = 1  # the processes the job starts (the most, for an elastic job)
    # Once a rank has exited 0, how long the others have to exit before the job is stopped (trainrun.lifecycle).
    exit_barrier_timeout: float = DEFAULT_EXIT_BARRIER_TIMEOUT
    # Ranks on other hosts over ssh: checked before the launch, swept at its end (trainrun.remote).
    remote: "RemoteHosts | None" = None

    def to_dict(self) -> dict:
        plan = {"backend": self.backend, "ranks": self.ranks, "argv": list(self.argv),
                "env": dict(sorted(self.env.items())), "spark_conf": dict(sorted(self.spark_conf.items())),
                "exit_barrier_timeout": self.exit_barrier_timeout}
        if self.remote is not None:
            plan["remote"] = self.remote.to_dict()
        return plan

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def to_text(self) -> str:
        lines = [f"backend: {self.backend}", f"ranks: {self.ranks}", f"argv: {shlex.join(self.argv)}",
                 f"exit barrier timeout: {self.exit_barrier_timeout:g}s", "env:"]
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
