"""One planner per backend; `plan_job` picks the one for a job description (srun's inside a Slurm allocation)."""
from __future__ import annotations

from ..job import MpiJob, SparkJob, TorchJob
from ..machine import Machine
from ..plan import Plan
from .mpi import HorovodGlooPlanner, MpiPlanner
from .srun import SrunMpiPlanner, SrunTorchPlanner, starts_through_srun
from .torch import TorchPlanner


def plan_job(job: MpiJob | TorchJob | SparkJob, machine: Machine) -> Plan:
    if isinstance(job, (MpiJob, TorchJob)) and starts_through_srun(job, machine):
        return (SrunMpiPlanner() if isinstance(job, MpiJob) else SrunTorchPlanner()).plan(job, machine)
    if isinstance(job, MpiJob):
        return (HorovodGlooPlanner() if job.gloo else MpiPlanner()).plan(job, machine)
    if isinstance(job, TorchJob):
        return TorchPlanner().plan(job, machine)
    from .spark import SparkPlanner  # with PySpark's launch code: imported for a Spark job alone

    return SparkPlanner().plan(job, machine)
