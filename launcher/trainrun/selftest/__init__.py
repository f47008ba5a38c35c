"""`trainrun selftest`: one command that checks and measures a machine's GPUs, collectives, torch.compile and Ray
Train.

driver.py runs the jobs through trainrun's planners and runner, worker.py is what their ranks run, report.py
judges the records the ranks print, sizes.py parses --sizes. This module only registers the subcommand, so
that every other trainrun command's start stays as cheap as it was."""
from __future__ import annotations

import argparse
from typing import Any

from ..arguments import positive, seconds
from .sizes import CPU_DEFAULT, GPU_DEFAULT

CPU_RANKS = 2  # without GPUs: the smallest job in which an allreduce moves data
SKIPPABLE = ("ray-train",)  # the checks --skip may leave out: the others are what a selftest is for
DEFAULT_TIMEOUT = 900.0  # per job; torch.compile's first step on two CPU cores takes a minute
DESCRIPTION = f"""\
Checks and measures this machine in one command; exit code 1 names every wrong result or missing device:
  - every framework sees every GPU: torch, TensorFlow and nvidia-smi agree (0 GPUs: the CPU path);
  - an allreduce sweep through torch.distributed, Horovod with torch and Horovod with TensorFlow (those
    installed) over NCCL on all local GPUs, or Gloo and MPI on {CPU_RANKS} CPU ranks, each sum checked element
    by element; it reports the time, algbw (bytes/time) and busbw = algbw x 2(n-1)/n, as nccl-tests does;
  - one training step of a torch.compile'd model, compared with eager mode;
  - where Ray is installed, Ray Train's TorchTrainer with 2 workers on a cluster of trainrun ray, its
    allreduce checked (--skip ray-train leaves it out).
With -H or --hostfile, the same on those hosts, over mpirun and ssh as `trainrun mpi -H` starts ranks.
When an NCCL sweep fails, it prints `trainrun doctor`'s hints for NCCL."""


def add_parser(sub: Any) -> None:
    """`trainrun selftest` in trainrun's subcommands (trainrun.arguments.build_parser)."""
    selftest = sub.add_parser("selftest", help="check and measure the GPUs, NCCL, Gloo, MPI, Horovod and "
                              "torch.compile of this machine or of -H hosts", description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    selftest.add_argument("--json", action="store_true", help="the report as JSON")
    selftest.add_argument("--sizes", metavar="LOW:HIGH|SIZE,...",
                          help=f"allreduce sizes in bytes: doubling from LOW up to HIGH, or a list (default "
                               f"{GPU_DEFAULT} with GPUs, {CPU_DEFAULT} on CPU); units B, KiB, MiB, GiB")
    hosts = selftest.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", dest="hosts", metavar="HOST:SLOTS,...",
                       help="run on these hosts, a rank per slot (give a GPU host a slot per GPU)")
    hosts.add_argument("--hostfile", metavar="FILE", help="a hostfile of `HOST slots=N` lines, as trainrun mpi's")
    selftest.add_argument("-p", "--ssh-port", type=positive, metavar="PORT",
                          help="sshd's port on the hosts (default $TRAINRUN_SSH_PORT, else ssh's)")
    selftest.add_argument("-i", "--ssh-identity-file", metavar="KEY",
                          help="the private key to log in with (default $TRAINRUN_SSH_IDENTITY_FILE, else ssh's)")
    selftest.add_argument("--skip", action="append", choices=SKIPPABLE, default=[], metavar="CHECK",
                          help="leave out a check (repeatable): " + ", ".join(SKIPPABLE) + " (Ray Train's "
                               "TorchTrainer, about 45 s on 2 CPU cores)")
    selftest.add_argument("--timeout", type=seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                          help=f"stop any one job of the selftest after SECONDS (default {DEFAULT_TIMEOUT:g})")
