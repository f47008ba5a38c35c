"""One planner per backend; `plan_job` picks the one for a job description."""
from __future__ import annotations

from ..job import MpiJob, SparkJob, TorchJob
from ..machine import Machine
from ..plan import Plan
from .mpi import HorovodGlooPlanner, MpiPlanner
from .spark import SparkPlanner
from .torch import TorchPlanner


def plan_job(job: MpiJob | TorchJob | SparkJob, machine: Machine) -> Plan:
    if isinstance(job, MpiJob):
        return (HorovodGlooPlanner() if job.gloo else MpiPlanner()).plan(job, machine)
    if isinstance(job, TorchJob):
        return TorchPlanner().plan(job, machine)
    return SparkPlanner().plan(job, machine)
