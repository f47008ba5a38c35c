"""Jobs inside a Slurm allocation (a shell of salloc or sbatch), started through srun: `trainrun mpi -np N` as
`srun --mpi=pmix` of the ranks on the allocation's nodes, `trainrun torch --nnodes N` as one torchrun per node on a
c10d rendezvous at the first node. No ssh, no host list: the allocation has both.

srun's own options where trainrun's mean the same (-N/--nodes, --ntasks-per-node, --mpi), and the two settings a
Slurm job should not miss: --kill-on-bad-exit=1, so that one failed rank ends the step instead of leaving the others
waiting in a collective (Lightning's guide asks for it), and --label for each line's rank.
"""
from __future__ import annotations

from dataclasses import replace

from ..containers import ContainerRoute, container_route
from ..engines.slurm import (allocation_note, check_fits, home_cache, master_port, srun_head,
                             tasks_on_first_node)
from ..errors import UsageError
from ..job import MpiJob, TorchJob
from ..machine import Machine
from ..plan import Plan, run_env, thread_env
from ..rank.env import SHOW_RANKS, rank_argv
from ..validate import rank_count, rank_list
from .mpi import user_env
from .torch import deepspeed_notes, processes_per_node, validate_torch_job

# What Open MPI 4.1 (Debian's, the images') speaks with srun; pmi2 and none fail in MPI_Init (trainrun doctor says
# which plugins this cluster's srun has).
MPI_TYPES = ("pmix", "pmix_v3", "pmix_v4", "pmix_v5", "pmi2", "none")
# What Slurm sets where it gave the job GPUs (srun --gpus*, --gres=gpu).
GPU_VARIABLES = ("SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS")


class SrunMpiPlanner:
    def plan(self, job: MpiJob, machine: Machine) -> Plan:
        allocation = machine.slurm
        assert allocation is not None
        ntasks = rank_count("-np", job.num_processes)
        if job.srun_mpi not in MPI_TYPES:
            raise UsageError("--mpi", job.srun_mpi, "is not an MPI plugin type of srun", valid=", ".join(MPI_TYPES))
        check_fits(job.nodes, ntasks, job.ntasks_per_node, allocation, "-np")
        for option, value in (("--output-filename", job.output_filename), ("--network-interface",
                                                                           job.network_interface)):
            if value:
                raise UsageError(option, value, "is mpirun's, and this job starts through srun inside Slurm job "
                                 f"{allocation.job_id}", valid="srun's own options in --mpi-args")
        local = tasks_on_first_node(ntasks, allocation, job.ntasks_per_node)
        env = {"MASTER_ADDR": allocation.nodes[0], "MASTER_PORT": str(master_port(allocation.job_id)),
               **thread_env(machine, local)}
        if job.ranks_filter is not None:
            env[SHOW_RANKS] = rank_list("--ranks-filter", job.ranks_filter, ntasks)
        env |= {**run_env(job.run), **user_env("-x", job.env, machine.environ)}
        label = job.tag_output and ntasks > 1
        statuses = home_cache(machine.environ)
        route = route_of(job, machine, env, statuses, pmix=job.srun_mpi.startswith("pmix"))
        argv = [*srun_head(ntasks, job.nodes, job.ntasks_per_node, label), f"--mpi={job.srun_mpi}",
                *route.srun_options(), *job.launcher_args, *route.prefix(),
                *rank_argv(job.program, route.python(machine.python))]
        note = allocation_note(allocation, f"{ntasks} ranks start through srun --mpi={job.srun_mpi}{route.note()}")
        return Plan(backend="mpi (srun)", argv=argv, env=env, ranks=ntasks, local_ranks=local, launcher="srun",
                    output_tags="lines" if label else "none", notes=(note,), run=job.run, status_parent=statuses,
                    container_image=route.image)


class SrunTorchPlanner:
    def plan(self, job: TorchJob, machine: Machine) -> Plan:
        allocation = machine.slurm
        assert allocation is not None
        endpoint = f"{allocation.nodes[0]}:{master_port(allocation.job_id)}"
        validate_torch_job(replace(job, rdzv_endpoint=endpoint))
        nodes = job.nnodes
        check_fits(nodes, nodes, 1, allocation, "--nnodes", "--nnodes")
        nproc = processes_per_node(job, machine)
        ranks = nproc * nodes
        tagged = job.tag_output and ranks > 1
        env = {**thread_env(machine, nproc), **run_env(job.run)}
        statuses = home_cache(machine.environ)
        route = route_of(job, machine, env, statuses, pmix=False)
        argv = [*srun_head(nodes, nodes, 1, label=False), *route.srun_options(), *route.prefix(),
                route.python(machine.python), "-m", "trainrun.torchrun",
                "--nnodes", str(nodes), "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", endpoint, "--rdzv-id", job.rdzv_id or f"slurm-{allocation.job_id}"]
        if job.max_restarts:
            argv += ["--max-restarts", str(job.max_restarts)]
        if tagged:
            argv += ["--tee", "3"]
        if job.log_dir:
            argv += ["--log-dir", job.log_dir]
        if job.local_ranks_filter:
            argv += ["--local-ranks-filter", job.local_ranks_filter]
        argv += [*job.launcher_args, "-m", "trainrun.rank", *job.program.rank_args()]
        note = allocation_note(allocation, f"one torchrun on each of {nodes} nodes through srun, rendezvous "
                                           f"c10d at {endpoint}{route.note()}")
        return Plan(backend="torch (srun)", argv=argv, env=env, ranks=ranks, local_ranks=nproc, launcher="srun",
                    output_tags="lines" if tagged else "none", notes=(*deepspeed_notes(job, ranks), note),
                    run=job.run, status_parent=statuses, container_image=route.image)


def route_of(job: MpiJob | TorchJob, machine: Machine, env: dict[str, str], statuses: str,
             pmix: bool) -> ContainerRoute:
    """The container every task runs the image in (--container-runtime), or the nodes' own Python."""
    gpus = machine.gpu_count > 0 or any(name in machine.environ for name in GPU_VARIABLES)
    # Besides the plan's variables, what the runner sets for relayed output (trainrun.runner).
    return container_route(job.container_runtime, job.container_image, workdir=machine.cwd, folders=(statuses,),
                           env=(*sorted(env), "PYTHONUNBUFFERED"), pmix=pmix, as_root=machine.is_root, gpus=gpus)


def starts_through_srun(job: MpiJob | TorchJob, machine: Machine) -> bool:
    """Inside an allocation: an MPI job that names no hosts of its own (and is not Horovod's Gloo controller), a
    torch job over several nodes that names no rendezvous."""
    if machine.slurm is None:
        return False
    if isinstance(job, MpiJob):
        return not job.hosts and not job.gloo
    return job.nnodes > 1 and job.max_nnodes is None and job.master_addr is None and job.rdzv_endpoint is None
