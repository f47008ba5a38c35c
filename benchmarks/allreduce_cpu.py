"""Allreduce bus bandwidth on 2 CPU ranks in the image: torch.distributed over Gloo against Horovod over Open MPI
under each setting that might slow it (mpirun's binding, the shared-memory transport's single-copy mechanism, coll
tuned's allreduce algorithm), Open MPI's own MPI_Allreduce (mpi4py) as its floor, and Horovod's Gloo controller
and its Gloo CPU operations.

    python benchmarks/allreduce_cpu.py [--image trainstack:cpu] [--rounds 3] [--sizes 1MiB:256MiB]
                                       [--out FILE | --update-results]

It runs for a long while: about 10 minutes on 2 cores with the defaults (the committed results record their own
`seconds`); `--rounds 1 --sizes 1MiB:16MiB` takes a few. The results go to --out, by default a scratch file
(benchmarks/results_file.py: under the system's temporary folder, printed at the end); --update-results writes the
committed benchmarks/results/allreduce_cpu.json, which the launcher guide's tables are generated from (`invoke
docs`).

Every job runs `python -m trainrun.selftest.worker allreduce SUITE cpu SIZES` (the selftest's own sweep, each sum
checked) under its launcher, with the launcher tree of this checkout (mounted over the image's). Two containers:
one where cross-memory attach works (--cap-add SYS_PTRACE: docker 20.10's default seccomp profile refuses
process_vm_readv without it, docker 23+'s allows it), one with a seccomp profile that refuses process_vm_readv and
process_vm_writev, as docker 20.10's default profile, a hardened profile or Yama's ptrace_scope 2 or 3 do. Each
round runs every configuration once in each container, in an order that turns by one each round (the machine's
other load meets every configuration alike); per size, a configuration's figure is the median over the rounds of
its busbw, and of its ratio to Gloo's busbw in the same container and round. Rows `mpirun as typed` and `trainrun
mpi` use no setting of their own: they measure the image's defaults (its MCA file and entrypoint) and trainrun's
plan. Every other row sets each suspect explicitly: the binding, the single-copy mechanism, and whether a rank
waiting for a message yields its core (mpi_yield_when_idle). Jobs get OMP_NUM_THREADS=1, as trainrun gives 2 ranks
on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

import results_file
from in_image import ROOT, result_from_image

from trainstack.image import openmpi_defaults

sys.path.insert(0, str(ROOT / "tests" / "support"))
from open_mpi_containers import CMA_REFUSED_MESSAGE, CONTAINER_OPTIONS, DOCKER_RUN_OPTIONS  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "allreduce_cpu.json"
RANKS = 2
GLOO = "torch gloo (torchrun)"
GOALS = {"cma allowed": 1.5, "cma refused": 0.95}  # Horovod over MPI's ratio to Gloo, at every size (issue 38)
DEFAULT_ROW = "horovod, mpirun as typed"  # the row the goals are judged on: what a user's plain mpirun gets


@dataclass(frozen=True)
class Config:
    launcher: str  # torchrun, mpirun, horovodrun (--gloo) or trainrun (mpi, its plan)
    suite: str = "horovod-torch"
    mpirun_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    def command(self, sizes: str) -> list[str]:
        worker = ["-m", "trainrun.selftest.worker", "allreduce", self.suite, "cpu", sizes]
        if self.launcher == "torchrun":
            return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(RANKS), *worker]
        if self.launcher == "horovodrun":
            return ["horovodrun", "--gloo", "-np", str(RANKS), "-H", f"localhost:{RANKS}", sys.executable, *worker]
        if self.launcher == "trainrun":
            return ["trainrun", "mpi", "-np", str(RANKS), sys.executable, *worker]
        exports = [arg for name, value in self.env.items() for arg in ("-x", f"{name}={value}")]
        return ["mpirun", "-np", str(RANKS), *self.mpirun_args, *exports, sys.executable, *worker]


FIXED = "fixed decision"  # Open MPI 4.1's own choice of allreduce algorithm by message size
RULES = "the image's rules"  # trainstack.image.openmpi_defaults: a segmented ring from 1 MiB


def mca(single_copy: str, bind: str, yield_when_idle: bool, algorithm: str | int = FIXED) -> tuple[str, ...]:
    """mpirun's options for one setting of each suspect, every one explicit, whatever the image's defaults: the
    allreduce algorithm is Open MPI's fixed decision, the image's rules file, or one algorithm forced for every size
    (the segmented ring with the rules' segment size)."""
    args = ["--bind-to", bind, "--mca", "btl_vader_single_copy_mechanism", single_copy,
            "--mca", "mpi_yield_when_idle", str(int(yield_when_idle))]
    if algorithm == FIXED:
        return (*args, "--mca", "coll_tuned_use_dynamic_rules", "0")
    args += ["--mca", "coll_tuned_use_dynamic_rules", "1"]
    if algorithm == RULES:
        return (*args, "--mca", "coll_tuned_dynamic_rules_filename", openmpi_defaults.COLL_RULES_FILE)
    args += ["--mca", "coll_tuned_allreduce_algorithm", str(algorithm)]
    if algorithm == openmpi_defaults.SEGMENTED_RING:
        args += ["--mca", "coll_tuned_allreduce_algorithm_segmentsize", str(openmpi_defaults.ALLREDUCE_RULES[-1][2])]
    return tuple(args)


def horovod(single_copy: str, bind: str, yield_when_idle: bool, algorithm: str | int = FIXED) -> Config:
    return Config("mpirun", mpirun_args=mca(single_copy, bind, yield_when_idle, algorithm))


def mpi4py(single_copy: str, algorithm: str) -> Config:
    return Config("mpirun", suite="mpi4py", mpirun_args=mca(single_copy, "core", True, algorithm))


# coll tuned's allreduce algorithms forced for every size.
ALGORITHMS = {4: "ring", 5: "segmented ring", 6: "rabenseifner"}
COMMON = {
    GLOO: Config("torchrun", suite="torch"),
    DEFAULT_ROW: Config("mpirun"),
    "horovod, trainrun mpi": Config("trainrun"),
    "horovod, none, bind core, no yield, fixed decision (the image's old settings)": horovod("none", "core", False),
    "horovod, none, bind core, yield, fixed decision": horovod("none", "core", True),
    "horovod, none, bind core, yield, the image's rules": horovod("none", "core", True, RULES),
    "horovod, none, bind none, yield, the image's rules": horovod("none", "none", True, RULES),
    "mpi4py, none, fixed decision": mpi4py("none", FIXED),
    "mpi4py, none, the image's rules": mpi4py("none", RULES),
    "horovod, image defaults, HOROVOD_CYCLE_TIME=0.1": Config("mpirun", env={"HOROVOD_CYCLE_TIME": "0.1"}),
    "horovod gloo controller (horovodrun --gloo)": Config("horovodrun"),
}
CONFIGS = {
    "cma allowed": {
        **COMMON,
        "horovod, cma, bind core, yield, fixed decision": horovod("cma", "core", True),
        "horovod, cma, bind core, no yield, fixed decision": horovod("cma", "core", False),
        "horovod, cma, bind core, no yield, the image's rules": horovod("cma", "core", False, RULES),
        "horovod, cma, bind none, yield, the image's rules": horovod("cma", "none", True, RULES),
        **{f"horovod, cma, bind core, yield, algorithm {number} ({name})": horovod("cma", "core", True, number)
           for number, name in ALGORITHMS.items()},
        "mpi4py, cma, fixed decision": mpi4py("cma", FIXED),
        "mpi4py, cma, the image's rules": mpi4py("cma", RULES),
        # Horovod's Gloo allreduce under the MPI controller: it dies of SIGSEGV in Horovod 0.28.1 (GlooContext is
        # not set up without the Gloo controller), a row to show that, not a speed.
        "horovod, HOROVOD_CPU_OPERATIONS=gloo": Config("mpirun", env={"HOROVOD_CPU_OPERATIONS": "gloo"}),
    },
    # Where cross-memory attach is refused (docker 20.10's default seccomp profile, as on this project's machine).
    "cma refused": COMMON,
}


def run_config(config: Config, sizes: str, timeout: float) -> dict:
    """One job: per size the slowest rank's seconds (None where a rank reported none or a wrong sum)."""
    from trainrun.selftest.report import records, sweep_from_records

    started = time.monotonic()
    try:
        job = subprocess.run(config.command(sizes), capture_output=True, text=True, timeout=timeout)
        output, error = job.stdout + job.stderr, None if job.returncode == 0 else f"exit {job.returncode}"
    except subprocess.TimeoutExpired as expired:
        output, error = f"{expired.stdout or ''}{expired.stderr or ''}", f"timed out after {timeout:g} s"
    byte_sizes = tuple(int(size) for size in sizes.split(","))
    sweep = sweep_from_records(config.suite, RANKS, byte_sizes, records(output), "", error)
    seconds = {str(result.size): result.seconds if result.correct else None for result in sweep.results}
    return {"seconds": seconds, "error": error, "job_seconds": round(time.monotonic() - started, 1),
            "cma_refused_messages": output.count(CMA_REFUSED_MESSAGE),
            **({"output_tail": output.splitlines()[-15:]} if error or None in seconds.values() else {})}


def round_in_container(environment: str, sizes: str, turn: int, timeout: float) -> dict:
    names = list(CONFIGS[environment])
    names = names[turn % len(names):] + names[:turn % len(names)]
    results = {}
    for name in names:
        results[name] = run_config(CONFIGS[environment][name], sizes, timeout)
        busiest = max((s for s in results[name]["seconds"].values() if s), default=0)
        print(f"  {environment}: {name}: {results[name]['job_seconds']} s"
              f"{', ' + results[name]['error'] if results[name]['error'] else ''}"
              f"{', largest size ' + format(busiest * 1e3, '.0f') + ' ms' if busiest else ''}", flush=True)
    return results


def summarize(rounds: list[dict], sizes: list[int]) -> dict:
    """Per environment and configuration: the command, and per size the median busbw and ratio to Gloo."""
    from trainrun.selftest.report import algorithm_bandwidth, bus_bandwidth
    from trainrun.selftest.sizes import format_size

    def busbw(seconds: float | None, size: int) -> float | None:
        return bus_bandwidth(algorithm_bandwidth(size, seconds), RANKS) / 1e9 if seconds else None

    def median(values: list[float | None]) -> float | None:
        present = [value for value in values if value is not None]
        return round(statistics.median(present), 3) if present else None

    table = {}
    for environment, configs in CONFIGS.items():
        rows = {}
        for name, config in configs.items():
            measured = [turn[environment][name] for turn in rounds]
            by_size = {}
            for size in sizes:
                own = [busbw(job["seconds"].get(str(size)), size) for job in measured]
                gloo = [busbw(turn[environment][GLOO]["seconds"].get(str(size)), size) for turn in rounds]
                ratios = [mine / theirs if mine and theirs else None for mine, theirs in zip(own, gloo)]
                by_size[format_size(size)] = {"busbw_gbps": median(own), "ratio_to_gloo": median(ratios),
                                              "busbw_each_round": [round(v, 3) if v else None for v in own]}
            rows[name] = {"command": " ".join(config.command("SIZES")).replace(sys.executable, "python"),
                          "sizes": by_size, "errors": [job["error"] for job in measured if job["error"]],
                          "cma_refused_messages": sum(job["cma_refused_messages"] for job in measured)}
        lowest = min((entry["ratio_to_gloo"] or 0 for entry in rows[DEFAULT_ROW]["sizes"].values()), default=0)
        table[environment] = {"goal": {"row": DEFAULT_ROW, "ratio_to_gloo_at_least": GOALS[environment],
                                       "lowest_ratio": lowest, "met": lowest >= GOALS[environment]},
                              "rows": rows}
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="trainstack:cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="1MiB:256MiB", help="as trainrun selftest --sizes")
    parser.add_argument("--timeout", type=float, default=300, help="seconds for any one job")
    results_file.add_options(parser, RESULTS.name)
    parser.add_argument("--in-container", metavar="ENVIRONMENT", choices=list(CONFIGS), help=argparse.SUPPRESS)
    parser.add_argument("--turn", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out = results_file.chosen(args, RESULTS.name)
    if args.in_container:
        args.out.write_text(json.dumps(round_in_container(args.in_container, args.sizes, args.turn, args.timeout)))
        return 0
    from trainrun.selftest.sizes import parse_sizes
    from trainstack import docker_client

    sizes = list(parse_sizes("--sizes", args.sizes))
    size_list = ",".join(map(str, sizes))
    image = docker_client.connect().images.get(args.image)
    load_at_start = round(os.getloadavg()[0], 2)
    started = datetime.now(timezone.utc)
    rounds = []
    for turn in range(args.rounds):
        print(f"round {turn + 1}/{args.rounds}", flush=True)
        rounds.append({environment: result_from_image(
            args.image, "allreduce_cpu.py",
            ["--in-container", environment, "--turn", str(turn), "--sizes", size_list, "--timeout", str(args.timeout)],
            timeout=args.timeout * len(CONFIGS[environment]), shm_size="1g",
            environment={"PYTHONPATH": "/src/launcher:/src", "OMP_NUM_THREADS": "1"}, **options)
            for environment, options in CONTAINER_OPTIONS.items()})
    table = summarize(rounds, sizes)
    result = {
        "benchmark": "allreduce busbw on 2 CPU ranks: torch gloo, Horovod over Open MPI by setting, mpi4py, "
                     "Horovod's Gloo controller and Gloo CPU operations",
        "image": {"tag": args.image, "id": image.id},
        "measured_at": started.isoformat(timespec="seconds"),
        "seconds": round((datetime.now(timezone.utc) - started).total_seconds()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, kernel {platform.release()}",
        "load_average_1m": {"start": load_at_start, "end": round(os.getloadavg()[0], 2)},
        "command": ["python", "benchmarks/allreduce_cpu.py", "--image", args.image, "--rounds", str(args.rounds),
                    "--sizes", args.sizes, *(["--update-results"] if args.update_results else [])],
        "rounds": args.rounds,
        "environments": {name: {"docker_run_options": options} for name, options in DOCKER_RUN_OPTIONS.items()},
        "results": table,
        "raw": rounds,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    from trainstack.docsite.pages import allreduce_tables

    print(allreduce_tables(args.out))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
