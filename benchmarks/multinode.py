"""Wall time of the Horovod MNIST example across two containers (a cluster of `invoke nodes.up`, launched with
`trainrun mpi -H` from a launcher container of `nodes.run`) beside the same training in one container
(`trainrun mpi -np 2`), both from container start to exit, interleaved.

    python benchmarks/multinode.py [--image trainstack:cpu] [--runs 5]

Writes benchmarks/results/multinode.json: per side the median seconds, every run's seconds, the final loss
and accuracy, and the machine. Both containers share this machine's cores: the figure is what ssh, the
launcher container and TCP between containers cost, not what a second machine gains.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from trainrun.image_contract import EXAMPLES_DIR
from trainstack import docker_client, nodes
from trainstack.image.workflows import CHECKPOINTS, summary

RESULTS = Path(__file__).parent / "results" / "multinode.json"
EXAMPLE = ["python", f"{EXAMPLES_DIR}/horovod_torch_mnist.py", "--checkpoint-dir", CHECKPOINTS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="trainstack:cpu")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    client = docker_client.connect()
    name = f"bench-nodes-{uuid.uuid4().hex[:6]}"
    plan = nodes.up(count=2, image=args.image, name=name, client=client)
    sides: dict[str, dict] = {"one container": {"seconds": []}, "two containers": {"seconds": []}}
    try:
        for _ in range(args.runs):
            started = time.monotonic()
            code, output = docker_client.run_in_image(client, args.image, ["trainrun", "mpi", "-np", "2", *EXAMPLE],
                                                      timeout=900)
            _record(sides["one container"], code, output, time.monotonic() - started)
            out = io.StringIO()
            started = time.monotonic()
            code = nodes.run(["trainrun", "mpi", "-np", "2", "-H", plan["hosts"], *EXAMPLE], name, client, out)
            _record(sides["two containers"], code, out.getvalue(), time.monotonic() - started)
    finally:
        nodes.down(name, client=client)
    for side in sides.values():
        side["median_seconds"] = round(statistics.median(side["seconds"]), 2)
    result = {
        "image": args.image,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "command": ["trainrun", "mpi", "-np", "2", "[-H WORKER-1:1,WORKER-2:1]", *EXAMPLE],
        "runs": args.runs,
        "results": sides,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def _record(side: dict, code: int, output: str, seconds: float) -> None:
    if code != 0:
        raise SystemExit(f"exit {code}:\n{output[-3000:]}")
    result = summary(output)
    side["seconds"].append(round(seconds, 2))
    side["final_loss"] = round(result["losses"][-1], 4)
    side["accuracy"] = round(result["accuracy"], 3)


if __name__ == "__main__":
    main()
