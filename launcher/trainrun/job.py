"""Job descriptions, one per backend, as the CLI and the Python API build them (with keywords)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .plan import RunOptions
from .program import Program
from .remote import SshOptions
from .engines.slurm import DEFAULT_MPI
from .validate import HostSlots


@dataclass(frozen=True, kw_only=True)
class MpiJob:
    num_processes: int
    program: Program
    hosts: tuple[HostSlots, ...] = ()
    env: tuple[str, ...] = ()  # -x NAME or -x NAME=VALUE
    gloo: bool = False  # Horovod's Gloo controller (horovodrun --gloo) instead of mpirun
    tag_output: bool = True  # prefix each line with its rank (when there is more than one)
    network_interface: str | None = None  # the one interface MPI, NCCL and Gloo traffic uses
    output_filename: str | None = None  # a directory for each rank's output files (Open MPI)
    launcher_args: tuple[str, ...] = ()  # passed to mpirun (or horovodrun) as given
    ranks_filter: str | None = None  # show only these ranks' output, e.g. "0" or "0,1"
    ssh: SshOptions = SshOptions()  # how other hosts are reached (trainrun.remote)
    hosts_option: str = "-H"  # where the hosts came from, named in errors: -H or --hostfile
    # Inside a Slurm allocation (trainrun.backends.srun): srun's --nodes, --ntasks-per-node and --mpi.
    nodes: int | None = None
    ntasks_per_node: int | None = None
    srun_mpi: str = DEFAULT_MPI
    container_runtime: str | None = None  # inside an allocation: the image on every task (trainrun.containers)
    container_image: str | None = None
    run: RunOptions = RunOptions()  # the timeouts and the output options, for every backend


@dataclass(frozen=True, kw_only=True)
class TorchJob:
    nproc_per_node: int | str  # a count, or torchrun's "auto", "gpu" or "cpu"
    program: Program
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    max_nnodes: int | None = None  # elastic: --nnodes MIN:MAX
    max_restarts: int = 0
    tag_output: bool = True
    log_dir: str | None = None
    local_ranks_filter: str | None = None
    launcher_args: tuple[str, ...] = ()  # passed to torchrun as given
    check_master: bool = False  # node 0's address (or the rendezvous host) must resolve (not for --dry-run)
    container_runtime: str | None = None  # inside an allocation: torchrun in the image on every node
    container_image: str | None = None
    run: RunOptions = RunOptions()  # the timeouts and the output options, for every backend


@dataclass(frozen=True, kw_only=True)
class SparkJob:
    num_processes: int
    program: Program
    master: str | None = None
    template: str | None = None
    template_set: tuple[tuple[str, str], ...] = ()  # template overrides, e.g. ("executor.instances", "4")
    conf: tuple[tuple[str, str], ...] = ()
    use_gpu: bool | None = None  # None: use GPUs when the Spark conf gives tasks GPUs
    local_mode: bool = False
    framework: str = "torch"  # "torch": a torch.distributed rank per task; "horovod": Horovod Gloo ranks
    ranks_filter: str | None = None  # show only these ranks' output, e.g. "0" or "0,1"
    max_restarts: int = 0  # a failed stage runs again up to N times
    check_master: bool = True  # a spark:// master must accept a connection (not for --dry-run, which stays offline)
    run: RunOptions = RunOptions()  # the timeouts and the output options, for every backend
    # The caller's SparkSession (trainrun.run(spark=session)): the stage runs in it, in this process.
    session: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, kw_only=True)
class SparkPoolJob:
    """`trainrun spark-pool`: a pool across a Slurm allocation's nodes for one command (not ranks of trainrun's)."""

    command: tuple[str, ...]
    template: str | None = None
    template_set: tuple[tuple[str, str], ...] = ()
    conf: tuple[tuple[str, str], ...] = ()
    placeholder_gpus: bool = False  # GPU addresses without devices (a template's gpu.placeholders)
    container_runtime: str | None = None  # master, workers and command in the image (trainrun.containers)
    container_image: str | None = None
    run: RunOptions = RunOptions()


@dataclass(frozen=True, kw_only=True)
class RayJob:
    """`trainrun ray`: a Ray cluster where the job runs (this host, a Slurm allocation, a Spark pool) for one driver,
    which runs with RAY_ADDRESS naming its head."""

    command: tuple[str, ...]
    program: Program  # the driver, checked here before anything starts
    num_cpus: int | None = None  # what each node offers Ray (None: what the engine gives the node)
    num_gpus: int | None = None
    include_dashboard: bool = False
    master: str | None = None  # Ray on Spark on this Spark master
    max_worker_nodes: int | None = None  # Ray on Spark's worker nodes (None: one per executor slot)
    run: RunOptions = RunOptions()
