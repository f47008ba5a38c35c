"""What trainrun prints about a job, for the `trainrun` command and the notebook's `%%trainrun` and `%%configure`
alike: a plan as --dry-run shows it, what trainrun says before it starts a job, and the line that ends it."""
from __future__ import annotations

import os
import sys

from .advice import oversubscription
from .errors import JobFailed
from .plan import Plan


def plan_text(plan: Plan, as_json: bool = False) -> str:
    """A plan as --dry-run prints it: as text, or as JSON. `%%configure` prints the notebook session's plan so."""
    return plan.to_json() if as_json else plan.to_text()


def announce(plan: Plan) -> None:
    """What trainrun says on stderr before it starts a job: a warning when its ranks crowd this host's cores, the
    plan itself with --verbose, and the plan's notes (such as the master Spark runs on)."""
    crowded = oversubscription(plan.local_ranks, os.cpu_count() or 1) if plan.ranks_start_here() else None
    text = f"trainrun: warning: {crowded}\n" if crowded else ""
    if plan.run.verbose:
        text += plan.to_text()
    sys.stderr.write(text + "".join(f"trainrun: {note}\n" for note in plan.notes))


def ending(plan: Plan, seconds: float, failed: JobFailed | None) -> str:
    """The line the CLI ends a job with: why it failed, or its exit code 0, after its ranks and how long it ran."""
    summary = f"{plan.ranks} rank{'s' if plan.ranks != 1 else ''} of {plan.backend}, {seconds:.1f} s"
    return f"trainrun: {failed} ({summary})\n" if failed is not None else f"trainrun: {summary}, exit code 0\n"
