"""Wall time of each user workflow (trainstack/workflows.py) in a built image.

    python benchmarks/workflows.py [--image trainstack:cpu]

Writes benchmarks/results/workflows.json: per workflow the seconds from container start to exit,
its final loss and accuracy.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

from trainstack import docker_client
from trainstack.workflows import WORKFLOWS, summary

RESULTS = Path(__file__).parent / "results" / "workflows.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="trainstack:cpu")
    args = parser.parse_args()
    client = docker_client.connect()
    results = {}
    for workflow in WORKFLOWS:
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
        print(f"{workflow.name}: {results[workflow.name]}", flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({
        "image": args.image,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "workflows": results,
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
