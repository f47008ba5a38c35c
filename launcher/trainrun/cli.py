"""`trainrun mpi|torch|spark|doctor|selftest`: parse options into a job, plan it, then print or run the plan. The
`%%trainrun` magic (trainrun.notebook) parses, plans and prints a dry run with the same functions."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from typing import Sequence

from . import __version__
from .advice import oversubscription, unknown_variables
from .arguments import (TrainrunParser, barrier_seconds, connect_seconds, nnodes, non_negative, nproc, positive,
                        seconds)
from .backends import plan_job
from .errors import JobFailed, TrainrunError, UsageError
from .job import MpiJob, SparkJob, TorchJob
from .machine import detect_machine
from .plan import DEFAULT_EXIT_BARRIER_TIMEOUT, Plan, RunOptions
from .program import check_program_here, program_from_command, program_from_script_args
from .remote import CONNECT_TIMEOUT, IDENTITY_ENV, KNOWN_HOSTS_ENV, PORT_ENV, SshOptions
from .selftest import add_parser as add_selftest_parser
from .validate import key_value, parse_hostfile, parse_hosts, spark_conf_item

EXAMPLES = """examples:
  trainrun mpi -np 2 python train.py                      # the mpirun line horovodrun builds
  trainrun mpi --gloo -np 2 python train.py               # Horovod's Gloo controller
  trainrun mpi -np 2 -H worker-1:1,worker-2:1 --ssh-port 2222 -i KEY python train.py   # ranks on other hosts
  trainrun torch --nproc-per-node 2 train.py --lr 0.1     # torch.distributed.run
  trainrun spark --num-processes 2 --template local-pool train.py   # a Spark barrier stage
  trainrun mpi -np 2 --dry-run --json python train.py     # the plan, nothing started
  trainrun doctor                                         # preflight checks
  trainrun selftest                                       # GPUs, allreduce sweeps and torch.compile, measured
"""


def _option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *names: str, **kwargs) -> None:
    """An option under its names and, as torchrun accepts, their underscore spellings (--nproc_per_node)."""
    spellings = [*names, *("--" + name[2:].replace("-", "_") for name in names if name.startswith("--") and "-" in name[2:])]
    parser.add_argument(*spellings, **kwargs)


def _common(parser: argparse.ArgumentParser, launcher: str) -> None:
    _option(parser, "--dry-run", action="store_true", help="print the plan (argv, env, Spark conf) and start nothing")
    parser.add_argument("--json", action="store_true", help="with --dry-run: print the plan as JSON")
    parser.add_argument("--timeout", type=seconds, metavar="SECONDS",
                        help="stop the whole job after SECONDS and exit 124")
    _option(parser, "--exit-barrier-timeout", type=barrier_seconds, default=DEFAULT_EXIT_BARRIER_TIMEOUT,
            metavar="SECONDS", help="once a rank has exited 0, stop the job (exit 124, naming the ranks that hung) "
                                    "if the others have not exited within SECONDS (default 300, as torchrun)")
    parser.add_argument("--verbose", action="store_true",
                        help="print the plan before starting the job (spark: Spark's own log lines too)")
    _option(parser, "--timestamp-output", action="store_true",
            help="prefix each output line with the time it arrived (HH:MM:SS.mmm)")
    _option(parser, "--no-tag-output", dest="tag_output", action="store_false",
            help="do not prefix each output line with its rank (the default with more than one rank)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="PROGRAM ...",
                        help=f"what every rank runs, with its arguments (a `--` before it is optional); {launcher}")


def build_parser() -> argparse.ArgumentParser:
    parser = TrainrunParser(
        prog="trainrun", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="One launcher over mpirun (Horovod), torch.distributed.run and Spark barrier jobs. "
                    "Every rank sees RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT.",
        epilog=EXAMPLES)
    parser.add_argument("--version", action="version", version=f"trainrun {__version__}")
    sub = parser.add_subparsers(dest="backend", required=True, metavar="{mpi,torch,spark,doctor,selftest}")

    mpi = sub.add_parser("mpi", usage="trainrun mpi -np N [-H host:slots,... | --hostfile FILE] [-x VAR[=VALUE]] "
                         "[--ssh-port PORT] [--ssh-identity-file KEY] [--gloo] PROGRAM ...",
                         help="mpirun (Open MPI or MPICH) as horovodrun builds it, or Horovod's Gloo controller",
                         description="Starts N ranks with mpirun the way horovodrun does (or horovodrun --gloo).")
    _option(mpi, "-np", "--num-processes", "--num-proc", dest="np", type=positive, required=True, metavar="N",
            help="the number of ranks")
    hosts = mpi.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", dest="hosts", metavar="HOST:SLOTS,...",
                       help="where ranks run, as mpirun -H and horovodrun -H (default localhost:N)")
    hosts.add_argument("--hostfile", metavar="FILE", help="a hostfile of `HOST slots=N` lines, as horovodrun's")
    mpi.add_argument("-x", dest="env", action="append", default=[], metavar="VAR[=VALUE]",
                     help="forward VAR (or set it) on every rank; repeatable")
    mpi.add_argument("--gloo", action="store_true", help="run through horovodrun --gloo instead of MPI")
    _option(mpi, "--network-interface", metavar="IFACE",
            help="the interface for MPI, NCCL and Gloo traffic (sets NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME)")
    _option(mpi, "--output-filename", metavar="DIR", help="also write each rank's output to files under DIR")
    _option(mpi, "--ranks-filter", metavar="RANKS", help="show only these ranks' output, e.g. 0 or 0,1")
    _option(mpi, "--mpi-args", default="", metavar="'ARGS'",
            help="extra arguments for mpirun (or horovodrun with --gloo), split as a shell would")
    ssh = mpi.add_argument_group("other hosts (ssh)", "Ranks on hosts other than this one start over ssh: each host "
                                 "is checked first (it answers and takes the key), and a failed or stopped job is "
                                 "ended on every host.")
    _option(ssh, "-p", "--ssh-port", type=positive, metavar="PORT",
            help=f"sshd's port on the hosts (default ${PORT_ENV}, else ssh's; trainstack-sshd: 2222)")
    _option(ssh, "-i", "--ssh-identity-file", metavar="KEY",
            help=f"the private key to log in with (default ${IDENTITY_ENV}, else ssh's keys and agent)")
    _option(ssh, "--ssh-known-hosts", metavar="FILE",
            help=f"accept only the host keys in FILE (default ${KNOWN_HOSTS_ENV}; without: a host's key is accepted "
                 "the first time the job meets it, into a known-hosts file of the job's own)")
    _option(ssh, "--ssh-connect-timeout", type=connect_seconds, metavar="SECONDS",
            help=f"how long ssh waits for a host to answer (default {CONNECT_TIMEOUT:g})")
    _common(mpi, "`python train.py`, `python -m pkg.train` or any command, as mpirun takes it")

    torch = sub.add_parser("torch", usage="trainrun torch --nproc-per-node N|auto|gpu|cpu [...] "
                           "[python] script.py ARGS | -m module ARGS",
                           help="torch.distributed.run (torchrun)",
                           description="Starts ranks with torch.distributed.run; takes torchrun's options.")
    _option(torch, "--nproc-per-node", type=nproc, default=1, metavar="N|auto|gpu|cpu",
            help="ranks on this node: a count, gpu (one per GPU), cpu (one per core), auto (gpu if any, else cpu)")
    _option(torch, "--nnodes", type=nnodes, default=(1, None), metavar="N|MIN:MAX",
            help="nodes (MIN:MAX for an elastic job, with --rdzv-endpoint)")
    _option(torch, "--node-rank", type=non_negative, default=0, help="this node's rank (static rendezvous)")
    _option(torch, "--master-addr", help="address of node 0 (static rendezvous; default 127.0.0.1)")
    _option(torch, "--master-port", type=positive, help="port on node 0 (default: a free port on one node, else 29500)")
    _option(torch, "--rdzv-endpoint", metavar="HOST:PORT", help="c10d rendezvous instead of a static one")
    _option(torch, "--rdzv-id", help="the job id of a c10d rendezvous (default trainrun)")
    torch.add_argument("--standalone", action="store_true",
                       help="a single-node job on a local rendezvous (what trainrun does without --nnodes)")
    _option(torch, "--max-restarts", type=non_negative, default=0, help="restart the ranks up to N times on failure")
    _option(torch, "--log-dir", metavar="DIR", help="torchrun's log directory")
    _option(torch, "--local-ranks-filter", metavar="RANKS", help="show only these local ranks' output, e.g. 0 or 0,1")
    torch.add_argument("-m", "--module", action="store_true", help="run PROGRAM as a module, as python -m")
    _option(torch, "--torchrun-args", default="", metavar="'ARGS'",
            help="extra arguments for torch.distributed.run, split as a shell would")
    _common(torch, "a script (`python` before it is accepted) or -m module, as torchrun takes it")

    spark = sub.add_parser("spark", usage="trainrun spark --num-processes N [--master URL] [--template NAME] "
                           "[--use-gpu|--no-gpu] [--local-mode] script.py ARGS",
                           help="a Spark barrier stage, one task per process (as TorchDistributor)",
                           description="Runs one Spark barrier stage with a task per rank.")
    _option(spark, "--num-processes", "-np", type=positive, required=True, metavar="N", help="the number of ranks")
    spark.add_argument("--master", help="Spark master URL (default: the template's, else local[N])")
    spark.add_argument("--template", help="cluster template name or file whose Spark conf is applied")
    spark.add_argument("--set", dest="template_set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a template setting, e.g. executor.instances=4")
    spark.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    gpu = spark.add_mutually_exclusive_group()
    _option(gpu, "--use-gpu", dest="use_gpu", action="store_true", default=None,
            help="GPUs for the ranks (needs spark.task.resource.gpu.amount; default: when --conf gives tasks "
                 "GPUs; a template's GPUs alone do not count)")
    _option(gpu, "--no-gpu", dest="use_gpu", action="store_false", help="run without GPUs (the default; drops the template's GPU settings)")
    _option(spark, "--local-mode", action="store_true", help="all ranks on this host, like TorchDistributor")
    _option(spark, "--ranks-filter", metavar="RANKS", help="show only these ranks' output, e.g. 0 or 0,1")
    spark.add_argument("--framework", choices=("torch", "horovod"), default="torch",
                       help="torch: a torch.distributed rank per task, with torchrun's variables; horovod: Horovod ranks")
    _common(spark, "a Python script or -m module")

    doctor = sub.add_parser("doctor", help="preflight checks before training",
                            description="Checks versions, GPU driver, NCCL hints and /dev/shm; exits 1 on a blocker.")
    doctor.add_argument("--json", action="store_true", help="the facts and checks as JSON")
    add_selftest_parser(sub)  # trainrun/selftest/: the selftest's own options
    return parser


def job_from_args(args: argparse.Namespace) -> MpiJob | TorchJob | SparkJob:
    if args.json and not args.dry_run:
        raise UsageError("--json", True, valid="together with --dry-run")
    command = args.command[1:] if args.command[:1] == ["--"] else list(args.command)
    if not command:
        raise UsageError("command", "", valid=f"a program and its arguments, e.g. trainrun {args.backend} ... train.py")
    run = RunOptions(timeout=args.timeout, exit_barrier_timeout=args.exit_barrier_timeout,
                     timestamp_output=args.timestamp_output, verbose=args.verbose)
    if args.backend == "mpi":
        hosts = (parse_hosts("-H", args.hosts) if args.hosts else
                 parse_hostfile("--hostfile", args.hostfile) if args.hostfile else ())
        ssh = SshOptions(args.ssh_port, args.ssh_identity_file, args.ssh_known_hosts, args.ssh_connect_timeout)
        return MpiJob(num_processes=args.np, program=program_from_command("command", command), hosts=hosts,
                      env=tuple(args.env), gloo=args.gloo, tag_output=args.tag_output,
                      network_interface=args.network_interface, output_filename=args.output_filename,
                      launcher_args=tuple(shlex.split(args.mpi_args)), ranks_filter=args.ranks_filter, ssh=ssh,
                      hosts_option="--hostfile" if args.hostfile else "-H", run=run)
    if args.backend == "torch":
        if args.standalone and (args.nnodes[0] > 1 or args.nnodes[1] or args.master_addr or args.rdzv_endpoint):
            raise UsageError("--standalone", True, valid="a single-node job: without --nnodes > 1, --master-addr or "
                                                         "--rdzv-endpoint")
        program = program_from_script_args("command", ["-m", *command] if args.module else command)
        return TorchJob(nproc_per_node=args.nproc_per_node, program=program, nnodes=args.nnodes[0],
                        node_rank=args.node_rank, master_addr=args.master_addr, master_port=args.master_port,
                        rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id, max_nnodes=args.nnodes[1],
                        max_restarts=args.max_restarts, tag_output=args.tag_output, log_dir=args.log_dir,
                        local_ranks_filter=args.local_ranks_filter,
                        launcher_args=tuple(shlex.split(args.torchrun_args)), check_master=not args.dry_run, run=run)
    conf = tuple(spark_conf_item("--conf", item) for item in args.conf)
    template_set = tuple(key_value("--set", item) for item in args.template_set)
    return SparkJob(num_processes=args.num_processes, program=program_from_script_args("command", command),
                    master=args.master, template=args.template, template_set=template_set, conf=conf,
                    use_gpu=args.use_gpu, local_mode=args.local_mode, framework=args.framework,
                    ranks_filter=args.ranks_filter, check_master=not args.dry_run, run=run)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["doctor"]:
            from .doctor import main as doctor_main

            return doctor_main(build_parser().parse_args(argv).json)
        if argv[:1] == ["selftest"]:
            from .selftest.driver import main as selftest_main

            return selftest_main(build_parser().parse_args(argv))
        args = build_parser().parse_args(argv)
        job = job_from_args(args)
        for warning in unknown_variables(os.environ):
            print(f"trainrun: warning: {warning}", file=sys.stderr)
        if args.dry_run:
            sys.stdout.write(dry_run(args, job))
            return 0
        plan = plan_job(job, detect_machine(args.backend))
        if ranks_start_here(plan):
            check_program_here("command", job.program)
        sys.stderr.write(announcement(plan))
        from .runner import run_plan

        started = time.monotonic()
        try:
            run_plan(plan)
        except JobFailed as err:
            print(f"trainrun: {err} ({_summary(plan, time.monotonic() - started)})", file=sys.stderr)
            return err.exit_code
        print(f"trainrun: {_summary(plan, time.monotonic() - started)}, exit code 0", file=sys.stderr)
        return 0
    except TrainrunError as err:
        print(f"trainrun: {err}", file=sys.stderr)
        return err.exit_code


def dry_run(args: argparse.Namespace, job: MpiJob | TorchJob | SparkJob) -> str:
    """What --dry-run prints, for `trainrun` and `%%trainrun` alike: the job's plan on this machine as text, or as
    JSON with --json; nothing starts."""
    return plan_text(plan_job(job, detect_machine(args.backend)), args.json)


def plan_text(plan: Plan, as_json: bool = False) -> str:
    """A plan as --dry-run prints it: as text, or as JSON. `%%configure` prints the notebook session's plan so."""
    return plan.to_json() if as_json else plan.to_text()


def ranks_start_here(plan: Plan) -> bool:
    """Whether every rank starts on this host, from its files: none on other hosts over ssh or on Spark executors
    elsewhere."""
    return plan.remote is None and plan.local_ranks > 0


def announcement(plan: Plan) -> str:
    """What trainrun says before it starts a job: a warning when its ranks crowd this host's cores, the plan itself
    with --verbose, and the plan's notes (such as the master Spark runs on)."""
    crowded = oversubscription(plan.local_ranks, os.cpu_count() or 1) if ranks_start_here(plan) else None
    text = f"trainrun: warning: {crowded}\n" if crowded else ""
    if plan.run.verbose:
        text += plan.to_text()
    return text + "".join(f"trainrun: {note}\n" for note in plan.notes)


def _summary(plan: Plan, seconds: float) -> str:
    return f"{plan.ranks} rank{'s' if plan.ranks != 1 else ''} of {plan.backend}, {seconds:.1f} s"


if __name__ == "__main__":
    sys.exit(main())
