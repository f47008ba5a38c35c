"""Launch overhead: `trainrun torch` / `trainrun mpi` against raw torchrun / mpirun on trivial 2-process jobs.

The target (trainrun / raw <= 1.05) is judged on `allreduce`, the trivial distributed job: two
ranks form a torch.distributed process group (gloo) and allreduce one tensor. Two more jobs show
the launcher's fixed cost: `noop` (each rank prints its rank) and `import-torch` (each rank imports
torch first, as any PyTorch script does). Runs are interleaved (raw, trainrun, raw, ...) so load
drifts on a shared machine hit both alike. The raw commands use the same launcher flags trainrun's plan uses,
so the ratio measures trainrun itself: its CLI start, planning, the runner, and the
rank entry (`sh` under mpirun, `python -m trainrun.rank` under torchrun) in each rank.

    python benchmarks/launch_overhead.py [--pairs N] [--note TEXT ...] [--out FILE | --update-results]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import results_file

TARGET_RATIO = 1.05
RUN_TIMEOUT = 300
# The console scripts beside this interpreter, not a version manager's shims found first on PATH.
BIN = Path(sys.executable).parent
TRAINRUN = str(BIN / "trainrun") if (BIN / "trainrun").exists() else shutil.which("trainrun") or "trainrun"
TORCHRUN = str(BIN / "torchrun") if (BIN / "torchrun").exists() else shutil.which("torchrun") or "torchrun"
PRINT_RANK = "print('rank', os.environ.get('RANK', os.environ.get('OMPI_COMM_WORLD_RANK')), flush=True)\n"
# Raw mpirun sets only OMPI_COMM_WORLD_*; trainrun and torchrun set RANK/WORLD_SIZE.
ALLREDUCE = """import os
import torch
import torch.distributed as dist
rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK")))
world_size = int(os.environ.get("WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE")))
dist.init_process_group("gloo", rank=rank, world_size=world_size)
total = torch.ones(1)
dist.all_reduce(total)
assert total.item() == world_size
dist.destroy_process_group()
"""
TARGET_JOB = "allreduce"
JOBS = {
    TARGET_JOB: ALLREDUCE,
    # Each rank prints its rank: the launcher's cost is all there is to measure.
    "noop": "import os\n" + PRINT_RANK,
    # Each rank imports torch first, as every PyTorch training script does.
    "import-torch": "import os\nimport torch\n" + PRINT_RANK,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def trainrun_plan(*args: str) -> list[str]:
    out = subprocess.run([TRAINRUN, *args[:1], "--dry-run", "--json", *args[1:]], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)["argv"]


Launch = tuple[list[str], dict[str, str]]


def commands(job: str) -> dict[str, tuple[Callable[[], Launch], list[str]]]:
    """backend -> (a function making the raw command and its env for one run; the trainrun command)."""
    mpi_plan = trainrun_plan("mpi", "-np", "2", "--", sys.executable, job)
    entry = mpi_plan.index("trainrun-rank")  # `sh -c SCRIPT trainrun-rank python job.py` -> `python job.py`
    raw_mpi = mpi_plan[:entry - 3] + mpi_plan[entry + 1:]
    return {
        "torch": (lambda: ([TORCHRUN, "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                            "--master-port", str(free_port()), job], {}),
                  [TRAINRUN, "torch", "--nproc-per-node", "2", "--", job]),
        # The plan forwards MASTER_ADDR/MASTER_PORT with -x; raw mpirun gets them as trainrun sets them.
        "mpi": (lambda: (raw_mpi, {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}),
                [TRAINRUN, "mpi", "-np", "2", "--", sys.executable, job]),
    }


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    # A blocking wait() returns the moment the job exits; wait(timeout=...) (and run(timeout=...)) polls
    # in sleeps of up to 50 ms, which rounded every time up to a 50 ms step.
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})
    watchdog = threading.Timer(RUN_TIMEOUT, proc.kill)
    watchdog.start()
    try:
        code = proc.wait()
    finally:
        watchdog.cancel()
    elapsed = time.perf_counter() - started
    if code != 0:
        raise subprocess.CalledProcessError(code, argv)
    return elapsed


def measure(raw: Callable[[], Launch], wrapped: list[str], pairs: int) -> dict:
    raw_times, trainrun_times = [], []
    for index in range(pairs + 1):  # the first pair warms caches and is dropped
        raw_argv, raw_env = raw()
        if index % 2 == 0:
            raw_time, trainrun_time = timed(raw_argv, raw_env), timed(wrapped)
        else:
            trainrun_time, raw_time = timed(wrapped), timed(raw_argv, raw_env)
        if index:
            raw_times.append(raw_time)
            trainrun_times.append(trainrun_time)
    raw_median, trainrun_median = statistics.median(raw_times), statistics.median(trainrun_times)
    # Each pair ran back to back, so its ratio cancels the load drifts of a shared machine; the
    # target is judged on the median of these.
    ratio = statistics.median(t / r for t, r in zip(trainrun_times, raw_times))
    return {
        "raw_command": raw_argv, "trainrun_command": wrapped, "pairs": pairs,
        "raw_seconds": [round(t, 4) for t in raw_times], "trainrun_seconds": [round(t, 4) for t in trainrun_times],
        "raw_median_s": round(raw_median, 4), "trainrun_median_s": round(trainrun_median, 4),
        "overhead_median_s": round(trainrun_median - raw_median, 4),
        "ratio_of_medians": round(trainrun_median / raw_median, 4),
        "median_pair_ratio": round(ratio, 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--backends", nargs="+", default=["torch", "mpi"], choices=["torch", "mpi"])
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), choices=list(JOBS))
    parser.add_argument("--label", default=platform.node(), help="where this ran, for the results file")
    parser.add_argument("--note", dest="notes", action="append", default=[],
                        help="what the figures mean, for the results file; repeatable")
    results_file.add_options(parser, "launch_overhead.json")
    args = parser.parse_args()
    args.out = results_file.chosen(args, "launch_overhead.json")
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for job_name in args.jobs:
            job = os.path.join(workdir, f"{job_name}.py")
            Path(job).write_text(JOBS[job_name])
            table = commands(job)
            for backend in args.backends:
                result = measure(*table[backend], args.pairs)
                for key in ("raw_command", "trainrun_command"):
                    result[key] = [a.replace(job, f"{job_name}.py") for a in result[key]]
                results[f"{backend}/{job_name}"] = {"job_source": JOBS[job_name], **result}
    report = {
        "benchmark": "launch overhead, trivial 2-process job",
        "target": {"job": TARGET_JOB, "ratio_at_most": TARGET_RATIO,
                   "met": {backend: results[f"{backend}/{TARGET_JOB}"]["median_pair_ratio"] <= TARGET_RATIO
                           for backend in args.backends} if TARGET_JOB in args.jobs else None},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"label": args.label, "cpus": os.cpu_count(), "python": platform.python_version(),
                 "load_average_1m_at_end": round(os.getloadavg()[0], 2)},
        "results": results,
        "notes": args.notes,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    for name, result in results.items():
        print(f"{name:20} raw {result['raw_median_s']:.3f}s  trainrun {result['trainrun_median_s']:.3f}s  "
              f"ratio {result['median_pair_ratio']:.3f} (of medians {result['ratio_of_medians']:.3f})  "
              f"overhead {result['overhead_median_s'] * 1000:.0f} ms")
    met = report["target"]["met"]
    if met is not None:
        print(f"target: {TARGET_JOB} ratio <= {TARGET_RATIO}: " + ", ".join(f"{b} {'met' if ok else 'MISSED'}"
                                                                          for b, ok in met.items()))
    return 0 if met is None or all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
