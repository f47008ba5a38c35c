"""`trainrun mpi|torch|spark|doctor`: parse options into a job, plan it, then print or run the plan."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .backends import plan_job
from .errors import TrainrunError, UsageError
from .job import MpiJob, SparkJob, TorchJob
from .machine import Machine, detect_machine
from .plan import Plan
from .program import program_from_command, program_from_script_args
from .validate import key_value, parse_hosts


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return int(text)


def non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return int(text)


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="print the plan and start nothing")
    parser.add_argument("--json", action="store_true", help="with --dry-run: print the plan as JSON")
    parser.add_argument("--timeout", type=seconds, metavar="SECONDS", help="stop the whole job after this long")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainrun", description=__doc__)
    sub = parser.add_subparsers(dest="backend", required=True, metavar="{mpi,torch,spark,doctor}")

    mpi = sub.add_parser("mpi", usage="trainrun mpi -np N [-H host:slots,...] [-x VAR ...] [--gloo] -- CMD ...",
                         help="mpirun (Open MPI or MPICH) as horovodrun builds it, or Horovod's Gloo controller")
    mpi.add_argument("-np", "--num-processes", dest="np", type=positive, required=True)
    mpi.add_argument("-H", "--hosts", dest="hosts", help="host:slots,... (default localhost:NP)")
    mpi.add_argument("-x", dest="env", action="append", default=[], metavar="VAR[=VALUE]",
                     help="forward VAR (or set it) on every rank; repeatable")
    mpi.add_argument("--gloo", action="store_true", help="run through horovodrun --gloo instead of MPI")
    _common(mpi)

    torch = sub.add_parser("torch", usage="trainrun torch --nproc-per-node N [...] -- script.py ARGS | -m module ARGS",
                           help="torch.distributed.run")
    torch.add_argument("--nproc-per-node", type=positive, required=True)
    torch.add_argument("--nnodes", type=positive, default=1)
    torch.add_argument("--node-rank", type=non_negative, default=0)
    torch.add_argument("--master-addr")
    torch.add_argument("--master-port", type=positive)
    torch.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="c10d rendezvous instead of a static one")
    torch.add_argument("--rdzv-id")
    _common(torch)

    spark = sub.add_parser("spark", usage="trainrun spark --num-processes N [--master URL] [--template NAME] "
                           "[--use-gpu|--no-gpu] [--local-mode] -- script.py ARGS",
                           help="a Spark barrier stage, one task per process")
    spark.add_argument("--num-processes", type=positive, required=True)
    spark.add_argument("--master", help="Spark master URL (default: the template's, else local[N])")
    spark.add_argument("--template", help="cluster template name or file whose Spark conf is applied")
    spark.add_argument("--set", dest="template_set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a template setting, e.g. executor.instances=4")
    spark.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    gpu = spark.add_mutually_exclusive_group()
    gpu.add_argument("--use-gpu", dest="use_gpu", action="store_true", default=None)
    gpu.add_argument("--no-gpu", dest="use_gpu", action="store_false")
    spark.add_argument("--local-mode", action="store_true", help="all ranks on this host, like TorchDistributor")
    spark.add_argument("--framework", choices=("torch", "horovod"), default="torch",
                       help="torch: torchrun in each task; horovod: Horovod ranks")
    _common(spark)

    doctor = sub.add_parser("doctor", help="preflight checks before training")
    doctor.add_argument("--json", action="store_true")
    return parser


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    if "--" not in argv:
        return list(argv), []
    cut = list(argv).index("--")
    return list(argv[:cut]), list(argv[cut + 1:])


def job_from_args(args: argparse.Namespace, command: list[str]) -> MpiJob | TorchJob | SparkJob:
    if not command:
        raise UsageError("command", "", f"the command after `--`, e.g. trainrun {args.backend} ... -- train.py")
    if args.backend == "mpi":
        hosts = parse_hosts("-H", args.hosts) if args.hosts else ()
        return MpiJob(args.np, program_from_command("command", command), hosts, tuple(args.env), args.gloo)
    if args.backend == "torch":
        return TorchJob(args.nproc_per_node, program_from_script_args("command", command), args.nnodes,
                        args.node_rank, args.master_addr, args.master_port, args.rdzv_endpoint, args.rdzv_id)
    conf = tuple(key_value("--conf", item) for item in args.conf)
    template_set = tuple(key_value("--set", item) for item in args.template_set)
    return SparkJob(args.num_processes, program_from_script_args("command", command), args.master, args.template,
                    template_set, conf, args.use_gpu, args.local_mode, args.framework)


def plan_from_argv(argv: Sequence[str], machine: Machine | None = None) -> tuple[Plan, argparse.Namespace]:
    options, command = split_command(argv)
    args = build_parser().parse_args(options)
    job = job_from_args(args, command)
    return plan_job(job, machine or detect_machine(args.backend)), args


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["doctor"]:
            from .doctor import main as doctor_main

            return doctor_main(build_parser().parse_args(argv).json)
        plan, args = plan_from_argv(argv)
        if args.json and not args.dry_run:
            raise UsageError("--json", True, "together with --dry-run")
        if args.dry_run:
            sys.stdout.write(plan.to_json() if args.json else plan.to_text())
            return 0
        from .runner import run_plan

        run_plan(plan, timeout=args.timeout)
        return 0
    except TrainrunError as err:
        print(f"trainrun: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
