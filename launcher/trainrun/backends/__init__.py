"""One planner per backend; `plan_job` picks the one for a job description (srun's inside a Slurm allocation)."""
from __future__ import annotations

from ..errors import UsageError
from ..job import MpiJob, RayJob, SparkJob, SparkPoolJob, TorchJob
from ..machine import Machine
from ..plan import Plan
from .mpi import HorovodGlooPlanner, MpiPlanner
from .srun import SrunMpiPlanner, SrunTorchPlanner, starts_through_srun
from .torch import TorchPlanner


def plan_job(job: MpiJob | TorchJob | SparkJob | SparkPoolJob | RayJob, machine: Machine) -> Plan:
    if isinstance(job, (MpiJob, TorchJob)) and starts_through_srun(job, machine):
        return (SrunMpiPlanner() if isinstance(job, MpiJob) else SrunTorchPlanner()).plan(job, machine)
    if isinstance(job, (MpiJob, TorchJob)) and job.container_runtime not in (None, "host"):
        raise UsageError("--container-runtime", job.container_runtime, "starts the image on the tasks srun starts, "
                         "and this job does not start through srun", valid="a job inside salloc or sbatch (mpi "
                         "without -H/--hostfile/--gloo, torch with --nnodes > 1), or docker run of the image here")
    if isinstance(job, MpiJob):
        return (HorovodGlooPlanner() if job.gloo else MpiPlanner()).plan(job, machine)
    if isinstance(job, TorchJob):
        return TorchPlanner().plan(job, machine)
    if isinstance(job, RayJob):
        from .ray import RayPlanner

        return RayPlanner().plan(job, machine)
    if isinstance(job, SparkPoolJob):
        from .spark.pool_job import SparkPoolPlanner

        return SparkPoolPlanner().plan(job, machine)
    from .spark import SparkPlanner  # with PySpark's launch code: imported for a Spark job alone

    return SparkPlanner().plan(job, machine)
