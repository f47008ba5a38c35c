"""`trainrun selftest`: checks and measures what this machine (or the hosts of -H) has, through trainrun's own
planners and runner: a probe job (one rank per host: the GPUs nvidia-smi, torch and TensorFlow see, one
torch.compile step), then an allreduce sweep per installed collective (torch.distributed, Horovod with torch
and with TensorFlow) over NCCL on the GPUs, or Gloo and MPI on CPU. Ranks report through their output
(trainrun.selftest.worker); trainrun.selftest.report judges it."""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
from typing import Any, BinaryIO, Callable, Iterator

from ..backends import plan_job
from ..doctor import Check, collect_facts, run_checks
from ..errors import JobFailed
from ..job import MpiJob, RayJob, TorchJob
from ..machine import Machine, detect_machine
from ..plan import Plan, RunOptions
from ..program import Program
from ..remote import SshOptions
from ..runner import run_plan
from ..validate import HostSlots, parse_hostfile, parse_hosts
from . import CPU_RANKS
from .report import (
    SUITE_TITLES,
    SUITES,
    Report,
    Sweep,
    compile_checks,
    device_checks,
    nccl_hints,
    ray_train_checks,
    records,
    sweep_from_records,
)
from .sizes import CPU_DEFAULT, GPU_DEFAULT, parse_sizes

WORKER = "trainrun.selftest.worker"
OUTPUT_TAIL_LINES = 15


class Interrupted(Exception):
    def __init__(self, failed: JobFailed) -> None:
        super().__init__(str(failed))
        self.exit_code = failed.exit_code


def _interrupted(failed: JobFailed) -> bool:
    """trainrun itself got SIGINT or SIGTERM (not a rank's own signal death): the selftest stops too."""
    return failed.rank is None and failed.signal is None and failed.exit_code - 128 in (signal.SIGINT,
                                                                                         signal.SIGTERM)


@contextlib.contextmanager
def captured_output() -> Iterator[BinaryIO]:
    """The job's stdout and stderr into a temporary file: descriptors 1 and 2, which the launcher inherits, point
    to it, and so do sys.stdout and sys.stderr (the runner then has nothing to relay). When the runner returns,
    the launcher and every process of the job have ended, so the file holds all they wrote; output relayed by a
    thread would have a bound on its drain instead."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 1)
        os.dup2(capture.fileno(), 2)
        try:
            with open(1, "w", closefd=False) as out, open(2, "w", closefd=False) as err, \
                    contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                yield capture
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


class Selftest:
    def __init__(self, hosts: tuple[HostSlots, ...], hosts_option: str, ssh: SshOptions, timeout: float,
                 skip: frozenset[str] = frozenset(), detect: Callable[[str], Machine] = detect_machine) -> None:
        self.hosts = hosts
        self.skip = skip
        self.hosts_option = hosts_option
        self.ssh = ssh
        self.timeout = timeout
        self.detect = detect  # injectable: unit tests plan for a fixed machine

    def plan(self, args: tuple[str, ...], ranks: int, one_per_host: bool = False) -> Plan:
        """The worker on `ranks` ranks: mpirun across -H hosts; here torchrun where torch is, else mpirun (or
        Horovod's Gloo controller)."""
        program = Program("module", WORKER, args)
        run = RunOptions(timeout=self.timeout)
        if self.hosts:
            hosts = tuple(HostSlots(host.name, 1) for host in self.hosts) if one_per_host else self.hosts
            return plan_job(MpiJob(num_processes=ranks, program=program, hosts=hosts, ssh=self.ssh,
                                   hosts_option=self.hosts_option, run=run),
                            self.detect("mpi"))
        if args[:2] in (("probe",), ("allreduce", "torch")):
            machine = self.detect("torch")
            if machine.has_torch:
                return plan_job(TorchJob(nproc_per_node=ranks, program=program, run=run), machine)
        machine = self.detect("mpi")
        return plan_job(MpiJob(num_processes=ranks, program=program, gloo=machine.mpi_flavor is None, run=run),
                        machine)

    def ray_plan(self, device: str) -> Plan:
        """The Ray Train check's driver under trainrun ray: a cluster where the selftest runs."""
        command = (sys.executable, "-m", WORKER, "ray-train", device)
        return plan_job(RayJob(command=command, program=Program("module", WORKER, command[3:]),
                               run=RunOptions(timeout=self.timeout)), self.detect("ray"))

    def run_job(self, label: str, plan: Plan) -> tuple[list[dict[str, Any]], str | None]:
        """Runs the plan with its output captured; the records its ranks printed, and why the job failed."""
        print(f"selftest: {label} ({plan.ranks} rank{'s' if plan.ranks != 1 else ''} of {plan.backend})",
              file=sys.stderr, flush=True)
        failed = None
        with captured_output() as capture:
            try:
                run_plan(plan)
            except JobFailed as job_failed:
                failed = job_failed
            capture.seek(0)
            output = capture.read().decode(errors="replace")
        if failed is None:
            return records(output), None
        if _interrupted(failed):
            raise Interrupted(failed)
        tail = output.splitlines()[-OUTPUT_TAIL_LINES:]
        print(f"selftest: {label} failed: {failed}; its last output:\n" + "\n".join(f"  {line}" for line in tail),
              file=sys.stderr, flush=True)
        return records(output), str(failed)

    def run(self, sizes: tuple[int, ...] | None) -> Report:
        report = Report()
        found, error = self.run_job("probe: GPUs, frameworks, torch.compile", self.plan(
            ("probe",), len(self.hosts) or 1, one_per_host=True))
        probes = [record for record in found if record.get("kind") == "probe"]
        if error:
            report.checks.append(Check("probe", "fail", error))
        report.hosts = probes
        report.checks += device_checks(probes, len(self.hosts) or 1)
        report.compiles = [record for record in found if record.get("kind") == "compile"]
        report.checks += compile_checks(found)
        report.gpu = bool(probes) and all(probe["gpus"]["nvidia-smi"] > 0 for probe in probes)
        report.sizes = sizes or parse_sizes("--sizes", GPU_DEFAULT if report.gpu else CPU_DEFAULT)
        ranks = sum(host.slots for host in self.hosts) if self.hosts else (
            probes[0]["gpus"]["nvidia-smi"] if report.gpu else CPU_RANKS)
        device = "cuda" if report.gpu else "cpu"
        for suite, module in SUITES.items():
            transport = "nccl" if report.gpu else "gloo" if suite == "torch" else "mpi"
            if not probes or not all(module in probe["frameworks"] for probe in probes):
                missing = [probe["host"] for probe in probes if module not in probe["frameworks"]]
                report.sweeps.append(Sweep(suite, ranks, transport, skipped=f"{module} is not installed or does "
                                           "not import" + (f" on {', '.join(missing)}" if missing else "")))
                continue
            sizes_arg = ",".join(str(size) for size in report.sizes)
            found, error = self.run_job(f"allreduce through {SUITE_TITLES[suite]}", self.plan(
                ("allreduce", suite, device, sizes_arg), ranks))
            report.sweeps.append(sweep_from_records(suite, ranks, report.sizes, found, transport, error))
        if "ray-train" in self.skip:
            report.checks.append(Check("ray-train", "skip", "left out: --skip ray-train"))
        elif not self.hosts and probes and "ray" in probes[0]["frameworks"]:
            found, error = self.run_job("Ray Train on a cluster of trainrun ray", self.ray_plan(device))
            report.checks += ray_train_checks(found) if found else [Check("ray-train", "fail", str(error))]
        if report.gpu and any(sweep.check().status == "fail" for sweep in report.sweeps):
            report.hints = nccl_hints(run_checks(collect_facts(os.environ)))
        return report


def main(args: argparse.Namespace) -> int:
    """Exit code 0 when every check passed, 1 naming what failed; 130/143 when interrupted (nothing is left
    running: the runner ends each job); bad options raise UsageError (exit 2)."""
    sizes = parse_sizes("--sizes", args.sizes) if args.sizes is not None else None
    hosts = (parse_hosts("-H", args.hosts) if args.hosts else
             parse_hostfile("--hostfile", args.hostfile) if args.hostfile else ())
    selftest = Selftest(hosts, "--hostfile" if args.hostfile else "-H",
                        SshOptions(args.ssh_port, args.ssh_identity_file), args.timeout, frozenset(args.skip))
    try:
        report = selftest.run(sizes)
    except Interrupted as stopped:
        print(f"trainrun: selftest stopped: {stopped}", file=sys.stderr)
        return stopped.exit_code
    except KeyboardInterrupt:
        print("trainrun: selftest stopped: received SIGINT", file=sys.stderr)
        return 128 + signal.SIGINT
    sys.stdout.write(report.to_json() if args.json else report.to_text())
    return 0 if report.ok else 1
