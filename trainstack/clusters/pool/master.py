"""What the standalone master reports at /json/: its workers, their cores, memory and GPUs."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Mapping

ALIVE = "ALIVE"


class MasterUnreachable(Exception):
    """The master's web UI did not answer (not started yet, or gone)."""


@dataclass(frozen=True)
class WorkerReport:
    host: str
    state: str
    cores: int
    cores_used: int
    memory_mib: int
    memory_used_mib: int
    gpu_addresses: tuple[str, ...]
    gpus_used: int


def read_master_state(ui_url: str, timeout: float = 5.0) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"{ui_url}/json/", timeout=timeout) as response:
            return json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise MasterUnreachable(f"{ui_url}/json/: {err}") from None


def worker_reports(state: Mapping[str, Any]) -> list[WorkerReport]:
    return [WorkerReport(
        host=worker["host"],
        state=worker["state"],
        cores=worker["cores"],
        cores_used=worker["coresused"],
        memory_mib=worker["memory"],
        memory_used_mib=worker["memoryused"],
        gpu_addresses=tuple(worker.get("resources", {}).get("gpu", {}).get("addresses", [])),
        gpus_used=len(worker.get("resourcesused", {}).get("gpu", {}).get("addresses", [])),
    ) for worker in state.get("workers", [])]


def missing_for_ready(state: Mapping[str, Any], workers: int, gpus_per_worker: int) -> str | None:
    """What the pool still lacks (e.g. '1 of 2 workers ALIVE'), or None once it is ready."""
    if state.get("status") != ALIVE:
        return f"master is {state.get('status', 'starting')}, not {ALIVE}"
    alive = [report for report in worker_reports(state) if report.state == ALIVE]
    if len(alive) < workers:
        return f"{len(alive)} of {workers} workers {ALIVE}"
    short = [report.host for report in alive if len(report.gpu_addresses) < gpus_per_worker]
    if short:
        return f"workers at {', '.join(short)} advertise fewer than {gpus_per_worker} GPUs"
    return None


def status_table(state: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """One row per worker the master knows; `names` maps a worker's IP to its container's name."""
    header = ("worker", "address", "state", "cores used", "memory used", "gpus", "gpus used")
    rows = [header] + [(
        names.get(report.host, "?"),
        report.host,
        report.state,
        f"{report.cores_used}/{report.cores}",
        f"{report.memory_used_mib}/{report.memory_mib} MiB",
        ",".join(report.gpu_addresses) or "-",
        f"{report.gpus_used}/{len(report.gpu_addresses)}",
    ) for report in sorted(worker_reports(state),
                           key=lambda report: (report.host not in names, names.get(report.host, ""), report.host))]
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in rows)
