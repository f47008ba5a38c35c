"""Spark pool start-up inside a Slurm allocation against the local pool of containers, side by side in one run.

Slurm: `salloc -N2 trainrun spark -np 2 noop.py` on the loopback two-node cluster (loopback_slurm), from
salloc's start to trainrun's `N workers registered` line: the allocation, trainrun's plan, the pool's secret, its
master and a worker on each node through srun, each registered with the master. Local: `invoke pool.up`'s pool of two
worker containers of the cpu image (trainstack.clusters.pool), from the call to every worker ALIVE, then `pool.down`.
Interleaved (Slurm, local, Slurm, ...) so that load drifts hit both alike. Run as root (the cluster's daemons and
docker), on a machine with the built cpu image:

    python benchmarks/slurm_pool.py [--pairs N] [--out FILE | --update-results]   # about a minute a pair
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import results_file

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "support"))  # the loopback cluster the Slurm tests run on

from trainstack.clusters import pool  # noqa: E402
from loopback_slurm import loopback_slurm  # noqa: E402
from trainstack.image.naming import flavor_image  # noqa: E402

RESULTS = "slurm_pool.json"
REGISTERED = "workers registered"
BENCH_POOL = "trainstack-bench-pool"


def slurm_pool_start(env: dict[str, str], cwd: Path) -> float:
    """Seconds from salloc's start to the pool's `workers registered` line; the job runs to its end after."""
    started = time.monotonic()
    process = subprocess.Popen(["salloc", "-N2", "trainrun", "spark", "-np", "2", "noop.py"], env=env, cwd=cwd,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    registered = None
    for line in process.stderr:
        if registered is None and REGISTERED in line:
            registered = time.monotonic() - started
    if process.wait() != 0 or registered is None:
        raise SystemExit(f"trainrun spark inside salloc failed (exit {process.returncode})")
    return registered


def local_pool_start(image: str) -> float:
    started = time.monotonic()
    try:
        pool.up(workers=2, image=image, name=BENCH_POOL, progress=lambda line: None)
        return time.monotonic() - started
    finally:
        pool.down(BENCH_POOL)


def measure(pairs: int, image: str) -> dict:
    times: dict[str, list[float]] = {"slurm": [], "local": []}
    with loopback_slurm() as cluster:
        root = cluster.root.parent
        (root / "noop.py").write_text("print('ok')\n")
        env = {name: value for name, value in cluster.env().items()
               if not name.startswith(("SLURM_", "OMPI_", "PMIX_")) or name == "SLURM_CONF"}
        env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
        slurm_pool_start(env, root)  # unrecorded: the first JVM start reads Spark's jars from disk
        for _ in range(pairs):
            times["slurm"].append(slurm_pool_start(env, root))
            times["local"].append(local_pool_start(image))
        machine = cluster.machine_facts()
    ratios = [slurm / local for slurm, local in zip(times["slurm"], times["local"])]
    return {"pairs": pairs, "image": image,
            "slurm_pool_seconds": [round(s, 2) for s in times["slurm"]],
            "local_pool_seconds": [round(s, 2) for s in times["local"]],
            "slurm_median": round(statistics.median(times["slurm"]), 2),
            "local_median": round(statistics.median(times["local"]), 2),
            "ratio_median": round(statistics.median(ratios), 3), "machine": machine}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--image", default=os.environ.get("TRAINSTACK_TEST_IMAGE", flavor_image("cpu")))
    results_file.add_options(parser, RESULTS)
    args = parser.parse_args()
    out = results_file.chosen(args, RESULTS)
    results = measure(args.pairs, args.image)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"pool start-up: inside a Slurm allocation {results['slurm_median']} s, the local pool of containers "
          f"{results['local_median']} s (median of {args.pairs}; ratio {results['ratio_median']}); {out}")


if __name__ == "__main__":
    main()
