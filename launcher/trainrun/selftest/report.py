"""What a selftest found, judged from the records its ranks print (trainrun.selftest.worker) by pure code: the
GPUs each framework sees, the torch.compile step, the allreduce sweeps with nccl-tests' bandwidths; and the
table and JSON that show it."""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from ..doctor import Check, format_checks
from .sizes import format_size

MARKER = "trainrun-selftest "
_RECORD = re.compile(re.escape(MARKER) + r"(\{.*\})\s*$")
# Where the sweeps' GPU check failures point: doctor's checks whose hints fix NCCL.
NCCL_CHECKS = ("nccl-p2p", "nccl-socket", "/dev/shm")
# The allreduce suites, by the module a rank imports for each, and how the table names them.
SUITES = {"torch": "torch", "horovod-torch": "horovod.torch", "horovod-tensorflow": "horovod.tensorflow"}
SUITE_TITLES = {"torch": "torch.distributed", "horovod-torch": "horovod.torch",
                "horovod-tensorflow": "horovod.tensorflow"}


def records(output: str) -> list[dict[str, Any]]:
    """The records in a job's output, wherever a launcher's tag ([1,0]<stdout>:, [default0]:) put them."""
    found = []
    for line in output.splitlines():
        match = _RECORD.search(line)
        if match:
            try:
                found.append(json.loads(match.group(1)))
            except ValueError:
                continue
    return found


def algorithm_bandwidth(size: int, seconds: float) -> float:
    """Bytes per second of one allreduce of `size` bytes (nccl-tests' algbw)."""
    return size / seconds


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' busbw of an allreduce: algbw x 2(n-1)/n, the rate each rank's link carries in a ring, which
    compares with the hardware's peak whatever n is."""
    return algbw * 2 * (ranks - 1) / ranks


@dataclass(frozen=True)
class SizeResult:
    size: int
    seconds: float | None  # the slowest rank's time per allreduce; None when a rank did not report
    correct: bool
    wrong_ranks: tuple[int, ...] = ()
    missing_ranks: tuple[int, ...] = ()

    def to_dict(self, ranks: int) -> dict[str, Any]:
        algbw = algorithm_bandwidth(self.size, self.seconds) if self.seconds else None
        return {"bytes": self.size, "size": format_size(self.size), "seconds": self.seconds,
                "algbw_gbps": round(algbw / 1e9, 4) if algbw else None,
                "busbw_gbps": round(bus_bandwidth(algbw, ranks) / 1e9, 4) if algbw else None,
                "correct": self.correct, "wrong_ranks": list(self.wrong_ranks),
                "missing_ranks": list(self.missing_ranks)}


@dataclass
class Sweep:
    suite: str
    ranks: int
    transport: str
    results: list[SizeResult] = field(default_factory=list)
    error: str | None = None  # the job failed: how (trainrun's one line)
    skipped: str | None = None  # not run: why

    @property
    def title(self) -> str:
        if self.skipped:
            return SUITE_TITLES[self.suite]
        return f"{SUITE_TITLES[self.suite]} ({self.transport}), {self.ranks} rank{'s' if self.ranks != 1 else ''}"

    def check(self) -> Check:
        if self.skipped:
            return Check("allreduce", "skip", f"{self.title}: {self.skipped}")
        problems = [f"{format_size(r.size)}: " + "; ".join(
            [*([f"wrong sum on rank {', '.join(map(str, r.wrong_ranks))}"] if r.wrong_ranks else []),
             *([f"no result from rank {', '.join(map(str, r.missing_ranks))}"] if r.missing_ranks else [])])
            for r in self.results if not r.correct]
        if self.error:
            problems.insert(0, self.error)
        elif not self.results:
            problems.append("no rank reported a result")
        if problems:
            return Check("allreduce", "fail", f"{self.title}: " + "; ".join(problems))
        sizes = f"{format_size(self.results[0].size)} to {format_size(self.results[-1].size)}"
        return Check("allreduce", "ok", f"{self.title}: {len(self.results)} sizes from {sizes}, every sum exact")

    def to_dict(self) -> dict[str, Any]:
        return {"suite": self.suite, "title": SUITE_TITLES[self.suite], "transport": self.transport,
                "ranks": self.ranks, "skipped": self.skipped, "error": self.error,
                "results": [r.to_dict(self.ranks) for r in self.results]}


def sweep_from_records(suite: str, ranks: int, sizes: tuple[int, ...], found: list[dict[str, Any]],
                       transport: str, error: str | None = None) -> Sweep:
    """Every rank's result for every size, combined: exact only where every rank reported an exact sum; timed by
    the slowest rank (the collective ends for all when it ends for the last)."""
    mine = [r for r in found if r.get("kind") == "allreduce" and r.get("suite") == suite]
    transport = next((r["transport"] for r in mine), transport)
    sweep = Sweep(suite, ranks, transport, error=error)
    for size in sizes:
        by_rank = {r["rank"]: r for r in mine if r["bytes"] == size}
        missing = tuple(rank for rank in range(ranks) if rank not in by_rank)
        if missing and len(missing) == ranks and error:
            continue  # the job stopped before this size: its error says why
        wrong = tuple(sorted(rank for rank, r in by_rank.items() if not r["correct"]))
        seconds = max(r["seconds"] for r in by_rank.values()) if by_rank and not missing else None
        sweep.results.append(SizeResult(size, seconds, not wrong and not missing, wrong, missing))
    return sweep


def device_checks(probes: list[dict[str, Any]], hosts: int) -> list[Check]:
    """On every host each framework sees the GPUs nvidia-smi lists; frameworks installed there import."""
    checks = []
    if len(probes) < hosts:
        checks.append(Check("hosts", "fail", f"{len(probes)} of {hosts} hosts reported what they have"))
    for probe in probes:
        host, gpus = probe["host"], probe["gpus"]
        listed = gpus["nvidia-smi"]
        seen = ", ".join(f"{name} {count}" for name, count in gpus.items())
        differ = [f"{name} sees {count}" for name, count in gpus.items() if count != listed]
        if differ:
            checks.append(Check("gpus", "fail", f"{host}: nvidia-smi lists {listed} GPU(s) but "
                                + ", ".join(differ), "check CUDA_VISIBLE_DEVICES and that each framework is "
                                "built for CUDA (`trainrun doctor`)"))
        else:
            checks.append(Check("gpus", "ok", f"{host}: {seen}" + ("" if listed else ": no GPU, the CPU path")))
        for name, why in sorted(probe["errors"].items()):
            checks.append(Check(name, "fail", f"{host}: import {name} failed: {why}"))
    return checks


def compile_checks(found: list[dict[str, Any]]) -> list[Check]:
    checks = []
    for record in (r for r in found if r.get("kind") == "compile"):
        where = f"{record['host']}: one step on {record['device']}"
        if record.get("error"):
            checks.append(Check("torch.compile", "fail", f"{where} failed: {record['error']}",
                                "torch.compile needs a C++ compiler (g++) and Python's headers; on GPU Triton "
                                "needs cc and libcuda"))
        elif not record["ok"]:
            checks.append(Check("torch.compile", "fail", f"{where}: compiled and eager differ by up to "
                                                         f"{record['max_abs_diff']:.3g}"))
        else:
            checks.append(Check("torch.compile", "ok", f"{where} equals eager (max difference "
                                f"{record['max_abs_diff']:.3g}), {record['compiled_seconds']:.1f} s with compiling"))
    return checks


def ray_train_checks(found: list[dict[str, Any]]) -> list[Check]:
    """Ray Train's TorchTrainer on the cluster trainrun ray started: its workers' sum, and the time of its fit."""
    checks = []
    for record in (r for r in found if r.get("kind") == "ray-train"):
        where = f"{record['host']}: TorchTrainer with {record['workers']} workers"
        if record.get("error"):
            checks.append(Check("ray-train", "fail", f"{where} failed: {record['error']}",
                                "trainrun doctor's ray lines; the driver alone: trainrun ray python DRIVER.py"))
        elif not record.get("correct"):
            checks.append(Check("ray-train", "fail", f"{where}: the allreduce over {record.get('backend')} is wrong"))
        else:
            checks.append(Check("ray-train", "ok", f"{where}: allreduce over {record['backend']} correct, fit in "
                                                   f"{record['seconds']:.1f} s"))
    return checks


def nccl_hints(doctor_checks: list[Check]) -> list[str]:
    """Doctor's hints for a failing NCCL (peer-to-peer, the socket interface, /dev/shm)."""
    return [f"{check.name}: {check.hint}" for check in doctor_checks if check.name in NCCL_CHECKS and check.hint]


@dataclass
class Report:
    hosts: list[dict[str, Any]] = field(default_factory=list)  # the probes: GPUs and frameworks per host
    checks: list[Check] = field(default_factory=list)
    sweeps: list[Sweep] = field(default_factory=list)
    compiles: list[dict[str, Any]] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    sizes: tuple[int, ...] = ()
    gpu: bool = False

    @property
    def ok(self) -> bool:
        return all(check.status != "fail" for check in self.all_checks())

    def all_checks(self) -> list[Check]:
        return [*self.checks, *(sweep.check() for sweep in self.sweeps)]

    def failures(self) -> list[str]:
        return [f"{check.name}: {check.detail}" for check in self.all_checks() if check.status == "fail"]

    def to_json(self) -> str:
        return json.dumps({
            "ok": self.ok, "path": "gpu" if self.gpu else "cpu", "hosts": self.hosts,
            "sizes": list(self.sizes), "checks": [asdict(check) for check in self.all_checks()],
            "compile": self.compiles, "allreduce": [sweep.to_dict() for sweep in self.sweeps],
            "failures": self.failures(), "hints": self.hints}, indent=2) + "\n"

    def to_text(self) -> str:
        hosts = ", ".join(probe["host"] for probe in self.hosts) or "no host answered"
        path = "GPU path (NCCL)" if self.gpu else "CPU path (Gloo, MPI)"
        sizes = f", allreduce sizes {format_size(self.sizes[0])} to {format_size(self.sizes[-1])}" if self.sizes else ""
        parts = [f"trainrun selftest on {hosts}: {path}{sizes}\n" + format_checks(self.all_checks())]
        parts += [sweep_table(sweep) for sweep in self.sweeps if not sweep.skipped]
        if self.hints:
            parts.append("NCCL failed; trainrun doctor's hints:\n" + "".join(f"  -> {hint}\n" for hint in self.hints))
        failures = self.failures()
        parts.append(f"selftest FAILED: {len(failures)} problem(s)\n" if failures else "selftest passed\n")
        return "\n".join(parts)


def sweep_table(sweep: Sweep) -> str:
    """nccl-tests' columns: size, time per allreduce, algbw and busbw in GB/s (10^9 bytes), and the check."""
    lines = [f"allreduce through {sweep.title}",
             f"{'size':>8} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}  result"]
    for result in sweep.results:
        row = result.to_dict(sweep.ranks)
        if result.seconds is None:
            timing = f"{'-':>12} {'-':>13} {'-':>13}"
        else:
            timing = f"{result.seconds * 1e6:>12.1f} {row['algbw_gbps']:>13.3f} {row['busbw_gbps']:>13.3f}"
        verdict = "ok" if result.correct else "WRONG" if result.wrong_ranks else "MISSING"
        lines.append(f"{format_size(result.size):>8} {timing}  {verdict}")
    if sweep.error:
        lines.append(f"  job failed: {sweep.error}")
    return "\n".join(lines) + "\n"
