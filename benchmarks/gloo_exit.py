"""Gloo's exit abort: how many two-rank DDP jobs die of SIGABRT after their work is done, with the image's site hook
(images/site-packages/trainstack_gloo_exit.py, which says why) and without it, side by side on one loaded machine.

In one container of the image, JOBS pairs of `torchrun --nproc-per-node 2 ddp_step.py` run. Each pair runs once with
TRAINSTACK_GLOO_EXIT_WAIT=0 (the hook off) and once with the hook on, in turn, so both arms meet the same load.
Meanwhile a second container keeps every core busy: the abort needs a rank's Gloo worker to be off the CPU at
the wrong moment, which a loaded machine (CI's, a shared node) makes common. The checkout's hook is mounted over
the image's, so the hook measured is the one in this tree. Per arm it counts the jobs that failed, how many of
them aborted ("terminate called without an active exception"), and the median wall time of a job, which shows
the hook's cost. --faulthandler runs the ranks with PYTHONFAULTHANDLER=1, as many training setups do (the abort
was first caught with it). Each setting is a row of the results file.

    python benchmarks/gloo_exit.py [--image trainstack:cpu] [--jobs 100] [--faulthandler]
                                   [--out FILE | --update-results]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import results_file
from in_image import result_from_image

ROOT = Path(__file__).resolve().parents[1]
HOOK_FILES = ("trainstack_gloo_exit.py", "trainstack-gloo-exit.pth")
SWITCH = "TRAINSTACK_GLOO_EXIT_WAIT"
ABORT = "terminate called without an active exception"
DDP_STEP = "/src/tests/image/units/ddp_step.py"
ARMS = {"hook off": "0", "hook on": "1"}
# What keeps every core busy beside the jobs.
SPIN = ("import multiprocessing as m, os\ndef spin(_):\n    while True: pass\n"
        "m.Pool(os.cpu_count()).map(spin, range(os.cpu_count()))")


def job(switch: str, faulthandler: bool) -> tuple[str, float]:
    """One two-rank DDP job under torchrun: its outcome (ok, abort, failed) and wall seconds."""
    env = {**os.environ, SWITCH: switch, "OMP_NUM_THREADS": "1"}
    if faulthandler:
        env["PYTHONFAULTHANDLER"] = "1"
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", DDP_STEP],
                         env=env, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - start
    if run.returncode == 0:
        return "ok", seconds
    output = run.stdout + run.stderr
    return ("abort" if ABORT in output else "failed"), seconds


def arms_in_container(jobs: int, faulthandler: bool) -> dict[str, dict]:
    outcomes: dict[str, list[str]] = {arm: [] for arm in ARMS}
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for number in range(jobs):
        for arm, switch in ARMS.items():
            outcome, wall = job(switch, faulthandler)
            outcomes[arm].append(outcome)
            seconds[arm].append(wall)
        print(f"pair {number + 1}/{jobs}: " + ", ".join(f"{arm} {outcomes[arm][-1]}" for arm in ARMS), flush=True)
    return {arm: {"jobs": jobs, "failed": sum(o != "ok" for o in outcomes[arm]),
                  "aborted": outcomes[arm].count("abort"),
                  "median_job_seconds": round(statistics.median(seconds[arm]), 3)} for arm in ARMS}


def run_in_image(image: str, jobs: int, faulthandler: bool) -> dict[str, dict]:
    """Runs this script's pairs in a container of `image` beside a container that keeps the cores busy."""
    from trainstack import docker_client

    client = docker_client.connect()
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site_packages = docker_client.run_in_image(client, image, ["python", "-c", where])[1].strip()
    hooks = {str(ROOT / "images" / "site-packages" / name): {"bind": f"{site_packages}/{name}", "mode": "ro"}
             for name in HOOK_FILES}
    load = client.containers.run(image, ["python", "-c", SPIN], detach=True)
    try:
        args = ["--in-container", "--jobs", str(jobs), *(["--faulthandler"] if faulthandler else [])]
        return result_from_image(image, "gloo_exit.py", args, timeout=jobs * 120, shm_size="1g", volumes=hooks)
    finally:
        docker_client.remove_each([load], force=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="trainstack:cpu")
    parser.add_argument("--jobs", type=int, default=100, help="pairs of jobs (one per arm)")
    results_file.add_options(parser, "gloo_exit.json")
    parser.add_argument("--faulthandler", action="store_true", help="ranks with PYTHONFAULTHANDLER=1")
    parser.add_argument("--in-container", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out = results_file.chosen(args, "gloo_exit.json")
    if args.in_container:
        Path(args.out).write_text(json.dumps(arms_in_container(args.jobs, args.faulthandler)))
        return 0
    setting = "PYTHONFAULTHANDLER=1" if args.faulthandler else "plain"
    measured_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    row = {"image": args.image, "measured_at": measured_at,
           "arms": run_in_image(args.image, args.jobs, args.faulthandler)}
    out = Path(args.out)
    rows = {**(json.loads(out.read_text())["results"] if out.exists() else {}), setting: row}
    report = {
        "benchmark": "gloo exit abort: two-rank DDP jobs under torchrun on a loaded machine, the site hook off and on",
        "host": {"cpus": os.cpu_count()},
        "target": {"aborted_with_hook": 0, "met": all(r["arms"]["hook on"]["aborted"] == 0 for r in rows.values())},
        "results": rows,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0 if report["target"]["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
