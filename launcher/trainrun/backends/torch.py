"""torch.distributed.run (torchrun) with a static rendezvous, or c10d with --rdzv-endpoint."""
from __future__ import annotations

from ..deepspeed_config import check_deepspeed_config, deepspeed_config_in_args, describe
from ..errors import MissingBackend, UsageError
from ..job import TorchJob
from ..machine import Machine
from ..plan import Plan, run_env, thread_env
from ..validate import check_resolves, host_port, port, positive_int, rank_count

INSTALL_TORCH = "pip install torch"
TORCHRUN_DEFAULT_PORT = 29500
# torchrun's words for --nproc-per-node besides a count.
NPROC_WORDS = ("auto", "gpu", "cpu")


def processes_per_node(job: TorchJob, machine: Machine) -> int:
    """--nproc-per-node as a count; torchrun's words: gpu (this host's GPUs), cpu (its cores), auto (GPUs if any)."""
    value = job.nproc_per_node
    if isinstance(value, int) and not isinstance(value, bool):
        return rank_count("--nproc-per-node", value)
    if value == "gpu" or (value == "auto" and machine.gpu_count):
        if not machine.gpu_count:
            raise UsageError("--nproc-per-node", value, valid="a number, cpu or auto on a host without GPUs")
        return machine.gpu_count
    if value in ("cpu", "auto"):
        return machine.cpu_count
    raise UsageError("--nproc-per-node", value, valid="a number >= 1, auto, gpu or cpu")


def validate_torch_job(job: TorchJob) -> None:
    positive_int("--nnodes", job.nnodes)
    if job.max_nnodes is not None:
        positive_int("--nnodes", job.max_nnodes)
        if job.max_nnodes < job.nnodes:
            raise UsageError("--nnodes", f"{job.nnodes}:{job.max_nnodes}", valid="MIN:MAX with MIN <= MAX")
        if job.rdzv_endpoint is None:
            raise UsageError("--nnodes", f"{job.nnodes}:{job.max_nnodes}",
                             valid="an elastic MIN:MAX range together with --rdzv-endpoint")
    if not 0 <= job.node_rank < job.nnodes:
        raise UsageError("--node-rank", job.node_rank, valid=f"0 <= rank < --nnodes ({job.nnodes})")
    if job.max_restarts < 0:
        raise UsageError("--max-restarts", job.max_restarts, valid="an integer >= 0")
    if job.program.kind == "exec":
        raise UsageError("command", job.program.target, valid="a Python script or -m module")
    if job.rdzv_endpoint is not None:
        host_port("--rdzv-endpoint", job.rdzv_endpoint)
        if job.master_addr is not None or job.master_port is not None:
            raise UsageError("--rdzv-endpoint", job.rdzv_endpoint,
                             valid="either it or --master-addr/--master-port, not both")
    elif job.nnodes > 1 and job.master_addr is None:
        raise UsageError("--master-addr", None, valid="the address of node 0 when --nnodes > 1 (or --rdzv-endpoint)")
    if job.master_port is not None:
        port("--master-port", job.master_port)


def check_master_resolves(job: TorchJob) -> None:
    """Across nodes, node 0's name must resolve here before torchrun starts (a typo otherwise waits out
    torchrun's rendezvous timeout, 10 minutes)."""
    if job.rdzv_endpoint is not None:
        check_resolves("--rdzv-endpoint", job.rdzv_endpoint, host_port("--rdzv-endpoint", job.rdzv_endpoint)[0])
    elif job.nnodes > 1 and job.master_addr is not None:
        check_resolves("--master-addr", job.master_addr, job.master_addr)


def deepspeed_notes(job: TorchJob, ranks: int) -> tuple[str, ...]:
    """The DeepSpeed config the script's arguments name (--deepspeed_config PATH), checked before any rank starts
    (against the world size unless the job is elastic): a note saying what it holds, or DeepSpeedConfigError."""
    path = deepspeed_config_in_args(job.program.args)
    if path is None:
        return ()
    settings = check_deepspeed_config(path, world_size=None if job.max_nnodes is not None else ranks)
    return (f"DeepSpeed config {path} checked: {describe(settings)}",)


class TorchPlanner:
    def plan(self, job: TorchJob, machine: Machine) -> Plan:
        if not machine.has_torch:
            raise MissingBackend("torch", INSTALL_TORCH)
        validate_torch_job(job)
        if job.check_master:
            check_master_resolves(job)
        nproc = processes_per_node(job, machine)
        ranks = nproc * (job.max_nnodes or job.nnodes)
        nnodes = f"{job.nnodes}:{job.max_nnodes}" if job.max_nnodes is not None else str(job.nnodes)
        argv = [machine.python, "-m", "trainrun.torchrun", "--nnodes", nnodes, "--nproc-per-node", str(nproc)]
        if job.rdzv_endpoint is not None:
            argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", job.rdzv_endpoint,
                     "--rdzv-id", job.rdzv_id or "trainrun"]
        else:
            # Single node: a port free on this host instead of torchrun's fixed 29500, so jobs can share a host.
            default_port = machine.free_port if job.nnodes == 1 else TORCHRUN_DEFAULT_PORT
            argv += ["--node-rank", str(job.node_rank),
                     "--master-addr", job.master_addr or "127.0.0.1",
                     "--master-port", str(job.master_port or default_port)]
        if job.max_restarts:
            argv += ["--max-restarts", str(job.max_restarts)]
        tagged = job.tag_output and ranks > 1
        if tagged:
            argv += ["--tee", "3"]  # each line on the console prefixed with its local rank, [default0]:
        if job.log_dir:
            argv += ["--log-dir", job.log_dir]
        if job.local_ranks_filter:
            argv += ["--local-ranks-filter", job.local_ranks_filter]
        argv += [*job.launcher_args, "-m", "trainrun.rank", *job.program.rank_args()]
        return Plan(backend="torch", argv=argv, env={**thread_env(machine, nproc), **run_env(job.run)}, ranks=ranks,
                    local_ranks=nproc, launcher="torchrun", output_tags="lines" if tagged else "none",
                    notes=deepspeed_notes(job, ranks), run=job.run)
