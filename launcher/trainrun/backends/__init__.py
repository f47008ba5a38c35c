"""One planner per backend; `plan_job` picks the one for a job description."""
from __future__ import annotations

import dataclasses

from ..job import MpiJob, SparkJob, TorchJob
from ..machine import Machine
from ..plan import Plan
from ..rank.env import VERBOSE
from .mpi import HorovodGlooPlanner, MpiPlanner
from .spark import SparkPlanner
from .torch import TorchPlanner


def plan_job(job: MpiJob | TorchJob | SparkJob, machine: Machine) -> Plan:
    if isinstance(job, MpiJob):
        plan = (HorovodGlooPlanner() if job.gloo else MpiPlanner()).plan(job, machine)
    elif isinstance(job, TorchJob):
        plan = TorchPlanner().plan(job, machine)
    else:
        plan = SparkPlanner().plan(job, machine)
    if job.run.verbose:  # every backend's ranks read it (trainrun.rank.entry, trainrun.torchrun)
        plan = dataclasses.replace(plan, env={**plan.env, VERBOSE: "1"})
    return plan
