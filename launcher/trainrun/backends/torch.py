"""torch.distributed.run (torchrun) with a static rendezvous, or c10d with --rdzv-endpoint."""
from __future__ import annotations

from ..errors import MissingBackend, UsageError
from ..job import TorchJob
from ..machine import Machine
from ..plan import Plan
from ..validate import host_port, port, positive_int

INSTALL_TORCH = "pip install torch"
TORCHRUN_DEFAULT_PORT = 29500


def validate_torch_job(job: TorchJob) -> None:
    positive_int("--nproc-per-node", job.nproc_per_node)
    positive_int("--nnodes", job.nnodes)
    if not 0 <= job.node_rank < job.nnodes:
        raise UsageError("--node-rank", job.node_rank, f"0 <= rank < --nnodes ({job.nnodes})")
    if job.program.kind == "exec":
        raise UsageError("command", job.program.target, "a Python script or -m module")
    if job.rdzv_endpoint is not None:
        host_port("--rdzv-endpoint", job.rdzv_endpoint)
        if job.master_addr is not None or job.master_port is not None:
            raise UsageError("--rdzv-endpoint", job.rdzv_endpoint, "either it or --master-addr/--master-port, not both")
    elif job.nnodes > 1 and job.master_addr is None:
        raise UsageError("--master-addr", None, "the address of node 0 when --nnodes > 1 (or --rdzv-endpoint)")
    if job.master_port is not None:
        port("--master-port", job.master_port)


class TorchPlanner:
    def plan(self, job: TorchJob, machine: Machine) -> Plan:
        if not machine.has_torch:
            raise MissingBackend("torch", INSTALL_TORCH)
        validate_torch_job(job)
        argv = [machine.python, "-m", "torch.distributed.run",
                "--nnodes", str(job.nnodes), "--nproc-per-node", str(job.nproc_per_node)]
        if job.rdzv_endpoint is not None:
            argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", job.rdzv_endpoint,
                     "--rdzv-id", job.rdzv_id or "trainrun"]
        else:
            # Single node: a port free on this host instead of torchrun's fixed 29500, so jobs can share a host.
            default_port = machine.free_port if job.nnodes == 1 else TORCHRUN_DEFAULT_PORT
            argv += ["--node-rank", str(job.node_rank),
                     "--master-addr", job.master_addr or "127.0.0.1",
                     "--master-port", str(job.master_port or default_port)]
        argv += ["-m", "trainrun.rank", *job.program.rank_args()]
        return Plan("torch", argv, {})
