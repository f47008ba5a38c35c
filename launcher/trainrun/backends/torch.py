"""torch.distributed.run (torchrun) with a static rendezvous, or c10d with --rdzv-endpoint; `trainrun torch`'s
options and the job they describe."""
from __future__ import annotations

import argparse
import shlex
from typing import Any

from ..arguments import add_container_options, add_job_options, add_option, non_negative, positive
from ..deepspeed_config import check_deepspeed_config, deepspeed_config_in_args, describe
from ..errors import MissingBackend, UsageError
from ..job import TorchJob
from ..machine import Machine
from ..plan import Plan, RunOptions, run_env, thread_env
from ..program import program_from_script_args
from ..validate import check_resolves, host_port, port, positive_int, rank_count

INSTALL_TORCH = "pip install torch"
TORCHRUN_DEFAULT_PORT = 29500
# Makes a c10d rendezvous give every round a store of its own (torch.distributed.elastic.rendezvous.dynamic_rendezvous).
RESTART_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
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
        notes, env = deepspeed_notes(job, ranks), {}
        if job.max_restarts:
            # A restarted group finds the last round's keys in a store kept across rounds and connects to ranks that
            # are gone (`Gloo connectFullMesh failed ... Connection refused`, pytorch/pytorch#135712): torchrun's
            # static rendezvous keeps one, c10d's shares its own with the workers unless told not to.
            env[RESTART_STORE_ENV] = "1"
        if job.rdzv_endpoint is not None:
            argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", job.rdzv_endpoint,
                     "--rdzv-id", job.rdzv_id or "trainrun"]
        elif job.max_restarts and job.nnodes == 1:
            endpoint = f"{job.master_addr or '127.0.0.1'}:{job.master_port or machine.free_port}"
            argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", job.rdzv_id or "trainrun"]
            notes += (f"--max-restarts {job.max_restarts}: a c10d rendezvous on {endpoint}, each round with a store "
                      "of its own (torchrun's static rendezvous keeps one across restarts)",)
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
        return Plan(backend="torch", argv=argv, env={**thread_env(machine, nproc), **env, **run_env(job.run)},
                    ranks=ranks, local_ranks=nproc, launcher="torchrun",
                    output_tags="lines" if tagged else "none", notes=notes, run=job.run)


def parse_nproc(text: str) -> int | str:
    """torchrun's --nproc-per-node: a count, or auto, gpu, cpu."""
    return text if text in NPROC_WORDS else positive(text)


def parse_nnodes(text: str) -> tuple[int, int | None]:
    """N, or MIN:MAX for an elastic job."""
    low, sep, high = text.partition(":")
    try:
        return positive(low), positive(high) if sep else None
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected N or MIN:MAX (integers >= 1), got {text!r}") from None


def add_parser(sub: Any) -> None:
    """`trainrun torch` in trainrun's subcommands (trainrun.arguments.build_parser)."""
    torch = sub.add_parser("torch", usage="trainrun torch --nproc-per-node N|auto|gpu|cpu [...] "
                           "[python] script.py ARGS | -m module ARGS",
                           help="torch.distributed.run (torchrun)",
                           description="Starts ranks with torch.distributed.run; takes torchrun's options.")
    add_option(torch, "--nproc-per-node", type=parse_nproc, default=1, metavar="N|auto|gpu|cpu",
               help="ranks on this node: a count, gpu (one per GPU), cpu (one per core), auto (gpu if any, else cpu)")
    add_option(torch, "--nnodes", type=parse_nnodes, default=(1, None), metavar="N|MIN:MAX",
               help="nodes (MIN:MAX for an elastic job, with --rdzv-endpoint)")
    add_option(torch, "--node-rank", type=non_negative, default=0, help="this node's rank (static rendezvous)")
    add_option(torch, "--master-addr", help="address of node 0 (static rendezvous; default 127.0.0.1)")
    add_option(torch, "--master-port", type=positive,
               help="port on node 0 (default: a free port on one node, else 29500)")
    add_option(torch, "--rdzv-endpoint", metavar="HOST:PORT", help="c10d rendezvous instead of a static one")
    add_option(torch, "--rdzv-id", help="the job id of a c10d rendezvous (default trainrun)")
    torch.add_argument("--standalone", action="store_true",
                       help="a single-node job on a local rendezvous (what trainrun does without --nnodes)")
    add_option(torch, "--max-restarts", type=non_negative, default=0,
               help="restart the ranks up to N times on failure")
    add_option(torch, "--log-dir", metavar="DIR", help="torchrun's log directory")
    add_option(torch, "--local-ranks-filter", metavar="RANKS",
               help="show only these local ranks' output, e.g. 0 or 0,1")
    torch.add_argument("-m", "--module", action="store_true", help="run PROGRAM as a module, as python -m")
    add_option(torch, "--torchrun-args", default="", metavar="'ARGS'",
               help="extra arguments for torch.distributed.run, split as a shell would")
    slurm = torch.add_argument_group("inside a Slurm allocation (salloc, sbatch)", "With --nnodes > 1 and no "
                                     "rendezvous of its own, one torchrun starts on each node through srun.")
    add_container_options(slurm)
    add_job_options(torch, "a script (`python` before it is accepted) or -m module, as torchrun takes it")
    torch.set_defaults(make_job=job_from_args)


def job_from_args(args: argparse.Namespace, command: list[str], run: RunOptions) -> TorchJob:
    """The job `trainrun torch`'s options describe (trainrun.arguments.job_from_args)."""
    if args.standalone and (args.nnodes[0] > 1 or args.nnodes[1] or args.master_addr or args.rdzv_endpoint):
        raise UsageError("--standalone", True, valid="a single-node job: without --nnodes > 1, --master-addr or "
                                                     "--rdzv-endpoint")
    program = program_from_script_args("command", ["-m", *command] if args.module else command)
    return TorchJob(nproc_per_node=args.nproc_per_node, program=program, nnodes=args.nnodes[0],
                    node_rank=args.node_rank, master_addr=args.master_addr, master_port=args.master_port,
                    rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id, max_nnodes=args.nnodes[1],
                    max_restarts=args.max_restarts, tag_output=args.tag_output, log_dir=args.log_dir,
                    local_ranks_filter=args.local_ranks_filter,
                    launcher_args=tuple(shlex.split(args.torchrun_args)), check_master=not args.dry_run,
                    container_runtime=args.container_runtime, container_image=args.container_image, run=run)
