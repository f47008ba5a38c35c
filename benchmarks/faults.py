"""Faults: how `trainrun` ends a job that goes wrong, per scenario and backend.

Scenarios (tests/support/ranks/fault_rank.py does the misbehaving; the harness is run_fault in
tests/support/fault_harness.py, which the lifecycle integration and image tests share):

  rank-hangs-after-other-exits-0            rank 0 exits 0, rank 1 never exits (--exit-barrier-timeout 5)
  rank-leaves-child-holding-stdout-success  each rank leaves `sleep`s holding its stdout and exits 0
  rank-leaves-child-holding-stdout-failure  the same, rank 1 then exits 3 while rank 0 sleeps
  rank-killed-by-sigkill                    the harness SIGKILLs rank 1's process (deepspeed: mid-step of ZeRO-2,
                                            the only scenario of that backend)
  trainrun-sigkilled                        the harness SIGKILLs trainrun itself
  rank-fails-then-timeout                   rank 1 exits 3 just before --timeout, rank 0 ignores SIGTERM
  worker-killed (pool only)                 `docker kill` of the pool worker under rank 1 while both ranks run

For each: trainrun's exit code, the seconds from the fault (rank 0's exit, the kill, rank 1's failure) to the
job's end (trainrun's exit; for trainrun-sigkilled, until no process of the job runs), and the processes of the
job still running once it ended (found by TRAINRUN_JOB_ID and by the harness's own tag, zombies excluded).
Target: every row ends within 30 s of the fault (of the exit barrier's end for the hang) with 0 processes left.

    python benchmarks/faults.py [--backends torch mpi spark gloo] [--scenarios ...] [--out FILE | --update-results]
    python benchmarks/faults.py --image trainstack:cpu --backends gloo    # the same, inside a built image
    python benchmarks/faults.py --pool trainstack:cpu                     # worker-killed on a local pool

Rows are keyed SCENARIO/BACKEND, each saying where it ran (this host or the image); a run replaces the rows it
measured and keeps the file's others. --image runs this script in a container of the image (the repository
mounted read-only), with the image's own trainrun, Horovod and Spark: the way to measure horovodrun's Gloo
backend on a host without Horovod. --pool starts a pool of the image (master and 2 workers), runs a 2-rank
`trainrun spark` job on it through pool.submit, kills the second worker's container and counts the job's
processes left in the pool's other containers, then takes the pool down and counts what of it is left.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import io
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from fault_harness import BACKEND_SCENARIOS, BARRIER_SECONDS, FAULTS, run_fault  # noqa: E402
from in_image import result_from_image  # noqa: E402
import results_file  # noqa: E402

TARGET_SECONDS = 30.0
BACKENDS = ("torch", "mpi", "gloo", "spark", "deepspeed")


def missing(backend: str) -> str | None:
    """Why this host cannot run the backend, or None."""
    if backend == "torch" and importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    if backend == "mpi" and shutil.which("mpirun") is None:
        return "mpirun is not on PATH"
    if backend == "gloo" and shutil.which("horovodrun") is None:
        return "horovodrun (Horovod) is not installed on this host"
    if backend == "spark" and (importlib.util.find_spec("pyspark") is None or shutil.which("java") is None):
        return "pyspark or java is missing"
    if backend == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        return "deepspeed is not installed on this host (python benchmarks/faults.py --image IMAGE --backends deepspeed)"
    return None


def row(backend: str, scenario: str) -> dict:
    fault = FAULTS[scenario]
    with tempfile.TemporaryDirectory(prefix="trainrun-faults-") as report_dir:
        run = run_fault(backend, scenario, Path(report_dir))
    seconds = run.seconds_after_fault
    budget = TARGET_SECONDS + (BARRIER_SECONDS if fault.fault == "hang" else 0)
    message = next((line for line in reversed(run.stderr.splitlines()) if line.startswith("trainrun: ")), None)
    return {
        "exit_code": run.exit_code,
        "expected_exit_code": fault.exit_code,
        "seconds_to_exit_after_fault": seconds,
        **({"seconds_after_exit_barrier": round(seconds - BARRIER_SECONDS, 2)} if fault.fault == "hang"
           and seconds is not None else {}),
        "processes_left": len(run.left),
        "processes_left_detail": run.left,
        "directories_left": run.left_dirs,
        "trainrun_message": message,
        "met": run.exit_code == fault.exit_code and seconds is not None and seconds < budget and not run.left
        and not run.left_dirs,
    }


def rows_in_image(image: str, backends: list[str], scenarios: list[str]) -> tuple[dict[str, dict], dict[str, str]]:
    """Runs this script in a throwaway container of `image`; returns its rows and skipped backends."""
    report = result_from_image(image, "faults.py", ["--label", image, "--backends", *backends,
                                                    "--scenarios", *scenarios], timeout=3600)
    return report["results"], report["skipped_backends"]


def pool_worker_killed_row(image: str) -> dict:
    # trainstack is host tooling; this script also runs inside the image (--image), where it is absent.
    from trainrun.ports import pick_free_port
    from trainstack import docker_client
    from trainstack.clusters import pool
    from trainstack.clusters.pool.layout import POOL_LABEL

    client = docker_client.connect()
    name = f"faults-{uuid.uuid4().hex[:6]}"
    plan = pool.up(workers=2, image=image, name=name, share=str(ROOT / "tests" / "image" / "units"), client=client,
                   master_port=pick_free_port("127.0.0.1"), ui_port=pick_free_port("127.0.0.1"),
                   progress=lambda line: None)
    out, result = io.StringIO(), []
    command = ["trainrun", "spark", "--master", plan["master_url"]["network"], "--num-processes", "2",
               "--template", "local-pool", "--set", "gpu.per_task=1", "--conf", "spark.task.maxFailures=1",
               "--conf", "spark.stage.maxConsecutiveAttempts=1", "--", "/job/pool_rank.py", "--hold", "600"]
    try:
        job = threading.Thread(target=lambda: result.append(pool.submit(command, name, client, out)), daemon=True)
        job.start()
        deadline = time.monotonic() + 300
        while len(re.findall(r"pool rank \d holding", out.getvalue())) < 2:
            if time.monotonic() > deadline or not job.is_alive():
                raise SystemExit(f"pool job did not start both ranks:\n{out.getvalue()[-3000:]}")
            time.sleep(0.2)
        client.containers.get(f"{name}-worker-2").kill()
        killed = time.monotonic()
        job.join(timeout=300)
        seconds = round(time.monotonic() - killed, 2) if not job.is_alive() else None
        left = [f"{container.name}: {' '.join(process[-1:])}"
                for container in client.containers.list(filters={"label": f"{POOL_LABEL}={name}"})
                for process in container.top()["Processes"] if "pool_rank.py" in process[-1]]
    finally:
        pool.down(name, client=client)
    pool_left = [item.name for item in (*client.containers.list(all=True, filters={"label": f"{POOL_LABEL}={name}"}),
                                         *client.networks.list(filters={"label": f"{POOL_LABEL}={name}"}))]
    # The driver's reason, then the runner's summary line.
    message = " | ".join(line for line in out.getvalue().splitlines() if line.startswith("trainrun: ")) or None
    return {
        "exit_code": result[0] if result else None,
        "expected_exit_code": 1,
        "seconds_to_exit_after_fault": seconds,
        "processes_left": len(left),
        "processes_left_detail": left,
        "pool_left_after_down": pool_left,
        "trainrun_message": message,
        "met": bool(result) and result[0] == 1 and seconds is not None and seconds < TARGET_SECONDS and not left
        and not pool_left,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--scenarios", nargs="+", default=list(FAULTS), choices=list(FAULTS))
    parser.add_argument("--label", default=platform.node(), help="where this ran, for the results file")
    parser.add_argument("--note", dest="notes", action="append", default=[])
    parser.add_argument("--image", help="run the scenarios inside this built image instead of on this host")
    parser.add_argument("--pool", metavar="IMAGE", help="instead: the worker-killed scenario on a local pool of IMAGE")
    results_file.add_options(parser, "faults.json")
    args = parser.parse_args()
    args.out = results_file.chosen(args, "faults.json")
    measured_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if args.pool:
        results, skipped = {"worker-killed/pool": {"ran_in": f"local pool of {args.pool}", "measured_at": measured_at,
                                                   **pool_worker_killed_row(args.pool)}}, {}
        print(json.dumps(results, indent=2))
    elif args.image:
        results, skipped = rows_in_image(args.image, args.backends, args.scenarios)
    else:
        results, skipped = {}, {}
        os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        for backend in args.backends:
            reason = missing(backend)
            if reason:
                skipped[backend] = reason
                continue
            for scenario in args.scenarios:
                if scenario not in BACKEND_SCENARIOS.get(backend, FAULTS):
                    continue
                results[f"{scenario}/{backend}"] = result = {
                    "ran_in": args.label, "measured_at": measured_at, **row(backend, scenario)}
                print(f"{scenario:42} {backend:6} exit {result['exit_code']!s:>4}  "
                      f"{result['seconds_to_exit_after_fault']!s:>6} s  left {result['processes_left']}  "
                      f"{'ok' if result['met'] else 'MISSED'}", flush=True)
    out = Path(args.out)
    earlier = json.loads(out.read_text()) if out.exists() else {}
    results = {**earlier.get("results", {}), **results}
    skipped = {backend: reason for backend, reason in {**earlier.get("skipped_backends", {}), **skipped}.items()
               if not any(key.endswith(f"/{backend}") for key in results)}
    report = {
        "benchmark": "faults: scenario x backend -> exit code, seconds to exit after the fault, processes left",
        "target": {"seconds_after_fault_at_most": TARGET_SECONDS, "exit_barrier_timeout": BARRIER_SECONDS,
                   "processes_left": 0, "met": all(r["met"] for r in results.values())},
        "measured_at": measured_at,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "notes": args.notes or earlier.get("notes", []),
        "skipped_backends": skipped,
        "results": dict(sorted(results.items())),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0 if report["target"]["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
