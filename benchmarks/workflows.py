"""Wall time of each user workflow (trainstack/image/workflows.py) in a built image, and trainrun against the
plain launcher users would otherwise type, on the same training.

    python benchmarks/workflows.py [--image trainstack:cpu]             # every workflow once
    python benchmarks/workflows.py --only deepspeed [--image ...]       # again for the workflows named so
    python benchmarks/workflows.py --pairs 10 [--image trainstack:cpu]  # trainrun / plain launcher
    python benchmarks/workflows.py --pairs 10 --only horovod           # again for the pairs named so
    python benchmarks/workflows.py --baseline trainstack:cpu --image NEW --pairs 5 [--cap-add SYS_PTRACE]

The first writes benchmarks/results/workflows.json: per workflow the seconds from container start to
exit, its final loss and accuracy (--only: the workflows whose name contains the text, each row naming its
image and time, the file's other rows kept). The second runs each pair back to back (plain then trainrun, then
trainrun then plain, ..., so drifting load and the cost of following another container hit both alike) and writes benchmarks/results/workflow_pairs.json: per pair the median
of the per-pair ratios trainrun / plain (target <= 1.03), the median seconds of each side and when it was
measured; --only re-measures the pairs whose name contains the text and keeps the others' results.
The third runs each of the Horovod rows (SETTINGS_ROWS) in the baseline image and in --image back to back, in
turns as the second, and writes benchmarks/results/workflow_settings.json: per row the median ratio new / baseline
and the median seconds of each, under a key naming the containers' options (--cap-add SYS_PTRACE lets Open MPI use
cross-memory attach under docker 20.10's seccomp profile); a row gets no slower with a ratio <= PAIR_TARGET.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

from trainrun.image_contract import EXAMPLES_DIR
from trainstack import docker_client
from trainstack.image.workflows import WORKFLOWS, summary

RESULTS = Path(__file__).parent / "results" / "workflows.json"
PAIR_RESULTS = Path(__file__).parent / "results" / "workflow_pairs.json"
SETTINGS_RESULTS = Path(__file__).parent / "results" / "workflow_settings.json"
PAIR_TARGET = 1.03
BY_NAME = {workflow.name: workflow.command for workflow in WORKFLOWS}
# trainrun's command and its plain twin, training the same example the same way.
PAIRS = {
    "horovod-torch (mpirun)": (BY_NAME["horovod-torch-trainrun"], BY_NAME["horovod-torch-mpirun"]),
    "horovod-keras (mpirun)": (BY_NAME["horovod-keras"], BY_NAME["horovod-keras-mpirun"]),
    "ddp (torchrun)": (BY_NAME["ddp-torchrun"], ["torchrun", *BY_NAME["ddp-torchrun"][2:]]),
    "ddp on Spark local[2] (TorchDistributor)": (
        ["trainrun", "spark", "--num-processes", "2", f"{EXAMPLES_DIR}/ddp_torch_mnist.py", "--lr=0.04",
         "--checkpoint-dir=/tmp/checkpoints"],
        BY_NAME["torch-distributor-script"]),
}


# The rows an image's Open MPI settings reach: Horovod under trainrun mpi and plain mpirun, and HorovodRunner.
SETTINGS_ROWS = ("horovod-torch-trainrun", "horovod-torch-mpirun", "horovod-keras", "horovod-keras-mpirun",
                 "horovod-runner")


def paired_seconds(client, name: str, sides: dict[str, dict], pairs: int) -> dict[str, list[float]]:
    """Each side's container (containers.create arguments) `pairs` times, back to back; which side goes first
    alternates: a container runs a little slower right after another one was removed (measured: always second,
    trainrun was 1.045x over 20 pairs; 1.00x run in one container)."""
    times: dict[str, list[float]] = {side: [] for side in sides}
    for pair in range(pairs):
        for side, create in sides.items() if pair % 2 == 0 else reversed(sides.items()):
            started = time.monotonic()
            status, output = docker_client.run_container(client, create, timeout=900)
            if status != 0:
                raise SystemExit(f"{name} ({side}) exited {status}:\n{output[-3000:]}")
            times[side].append(time.monotonic() - started)
    return times


def run_settings(client, image: str, baseline: str, pairs: int, only: str | None, cap_add: list[str]) -> None:
    environment = " ".join(f"--cap-add {capability}" for capability in cap_add) or "docker's defaults"
    previous = json.loads(SETTINGS_RESULTS.read_text()) if SETTINGS_RESULTS.exists() else {}
    results = previous.get("environments", {}).get(environment, {})
    for name in SETTINGS_ROWS:
        if only and only not in name:
            continue
        sides = {side: {"image": tag, "command": BY_NAME[name], "cap_add": cap_add}
                 for side, tag in (("baseline", baseline), ("new", image))}
        times = paired_seconds(client, name, sides, pairs)
        ratios = [new / old for new, old in zip(times["new"], times["baseline"])]
        results[name] = {
            "command": " ".join(BY_NAME[name]), "median_ratio": round(statistics.median(ratios), 3),
            "median_seconds": {side: round(statistics.median(values), 2) for side, values in times.items()},
            "ratios": [round(ratio, 3) for ratio in ratios], "no_slower": statistics.median(ratios) <= PAIR_TARGET,
            "pairs": pairs, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        print(f"{environment}: {name}: {results[name]['median_ratio']} {results[name]['median_seconds']}", flush=True)
    SETTINGS_RESULTS.write_text(json.dumps({
        "benchmark": "Horovod workflow rows: wall seconds in the baseline image and in the new one, side by side",
        "images": {"baseline": baseline, "new": image}, "target_ratio": PAIR_TARGET,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "environments": {**previous.get("environments", {}), environment: dict(sorted(results.items()))},
    }, indent=2) + "\n")


def run_pairs(client, image: str, pairs: int, only: str | None) -> None:
    previous = json.loads(PAIR_RESULTS.read_text()) if only and PAIR_RESULTS.exists() else {}
    results = previous.get("results", {}) if previous.get("image") == image else {}
    for name, (trainrun_command, plain_command) in PAIRS.items():
        if only and only not in name:
            continue
        times = paired_seconds(client, name, {"plain": {"image": image, "command": plain_command},
                                              "trainrun": {"image": image, "command": trainrun_command}}, pairs)
        ratios = [ours / plain for ours, plain in zip(times["trainrun"], times["plain"])]
        results[name] = {
            "trainrun": " ".join(trainrun_command), "plain": " ".join(plain_command),
            "median_ratio": round(statistics.median(ratios), 3),
            "median_seconds": {side: round(statistics.median(values), 2) for side, values in times.items()},
            "ratios": [round(ratio, 3) for ratio in ratios],
            "meets_target": statistics.median(ratios) <= PAIR_TARGET,
            "pairs": pairs,
            "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        print(f"{name}: {results[name]['median_ratio']} {results[name]['median_seconds']}", flush=True)
    PAIR_RESULTS.write_text(json.dumps({
        "image": image, "target_ratio": PAIR_TARGET, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "results": dict(sorted(results.items())),
    }, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="trainstack:cpu")
    parser.add_argument("--pairs", type=int, help="instead: N back-to-back pairs of trainrun and its plain twin")
    parser.add_argument("--only", help="only the workflows (with --pairs: the pairs) whose name contains this text")
    parser.add_argument("--baseline", help="with --pairs: the Horovod rows in this image against --image instead")
    parser.add_argument("--cap-add", action="append", default=[], help="with --baseline: a capability for both")
    args = parser.parse_args()
    client = docker_client.connect()
    if args.baseline:
        run_settings(client, args.image, args.baseline, args.pairs or 5, args.only, args.cap_add)
        return
    if args.pairs:
        run_pairs(client, args.image, args.pairs, args.only)
        return
    previous = json.loads(RESULTS.read_text()) if args.only and RESULTS.exists() else {}
    results = previous.get("workflows", {})
    for workflow in WORKFLOWS:
        if args.only and args.only not in workflow.name:
            continue
        started = time.monotonic()
        status, output = docker_client.run_in_image(client, args.image, workflow.command, timeout=900)
        seconds = time.monotonic() - started
        outcome = summary(output) if status == 0 else {}
        results[workflow.name] = {
            "origin": workflow.origin,
            "seconds": round(seconds, 1),
            "exit_code": status,
            "final_loss": round(outcome["losses"][-1], 4) if outcome else None,
            "accuracy": round(outcome["accuracy"], 4) if outcome else None,
        }
        if args.only:
            results[workflow.name].update(image=args.image,
                                          measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        print(f"{workflow.name}: {results[workflow.name]}", flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({
        "image": previous.get("image", args.image),
        "measured_at": previous.get("measured_at", datetime.now(timezone.utc).isoformat(timespec="seconds")),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "workflows": results,
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
