"""`trainrun selftest --json` in a container of the image: what its CPU path (no GPU there) measures, the
allreduce sweeps of torch.distributed over Gloo and of Horovod over MPI with torch and with TensorFlow, and a
torch.compile step, with every sum checked.

    python benchmarks/selftest.py [--image trainstack:cpu] [--sizes 8B:64MiB] [--launcher launcher/]

Writes a scratch file, or with --update-results benchmarks/results/selftest.json (benchmarks/results_file.py): the
image (tag, id, flavor), the machine, the command, the selftest's own JSON report, and per sweep the busbw at the
largest size. --launcher runs the selftest of a launcher source tree mounted over the image's (PYTHONPATH), to
measure a change before the image is rebuilt with it. The container gets --shm-size 1g, as the image tier's.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
from datetime import datetime, timezone
from pathlib import Path

import results_file

from trainstack import docker_client

RESULTS = Path(__file__).parent / "results" / "selftest.json"
# The report alone on stdout; the selftest's progress lines on stderr come too only when it fails.
COMMAND = "trainrun selftest --json {sizes} 2>/tmp/selftest.err; code=$?; [ $code -eq 0 ] || cat /tmp/selftest.err >&2; exit $code"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", default="trainstack:cpu")
    parser.add_argument("--sizes", help="--sizes for the selftest (default: its own, 8B:64MiB on CPU)")
    parser.add_argument("--launcher", type=Path, help="a launcher source tree to run instead of the image's")
    results_file.add_options(parser, "selftest.json")
    args = parser.parse_args()
    args.out = results_file.chosen(args, "selftest.json")
    client = docker_client.connect()
    image = client.images.get(args.image)
    sizes = f"--sizes {args.sizes}" if args.sizes else ""
    create = {"image": args.image, "command": ["sh", "-c", COMMAND.format(sizes=sizes)], "shm_size": "1g"}
    if args.launcher:
        create["volumes"] = {str(args.launcher.resolve()): {"bind": "/src/launcher", "mode": "ro"}}
        create["environment"] = {"PYTHONPATH": "/src/launcher"}
    load_at_start = round(os.getloadavg()[0], 2)
    started = datetime.now(timezone.utc)
    code, output = docker_client.run_container(client, create, timeout=1800)
    seconds = (datetime.now(timezone.utc) - started).total_seconds()
    try:
        report = json.loads(output)
    except ValueError:
        raise SystemExit(f"exit {code}, no report:\n{output[-3000:]}") from None
    result = {
        "benchmark": "trainrun selftest in the image (CPU path)",
        "image": {"tag": args.image, "id": image.id, "flavor": image.labels.get("io.trainstack.flavor")},
        "launcher": f"mounted from {args.launcher}" if args.launcher else "the image's",
        "measured_at": started.isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        # Other work on the machine slows the sweeps: the load around the run says how much there was.
        "load_average_1m": {"start": load_at_start, "end": round(os.getloadavg()[0], 2)},
        "command": ["trainrun", "selftest", "--json", *sizes.split()],
        "exit_code": code,
        "seconds": round(seconds, 1),
        "largest_size_busbw_gbps": {sweep["suite"]: sweep["results"][-1]["busbw_gbps"]
                                    for sweep in report["allreduce"] if sweep["results"]},
        "report": report,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"exit {code} in {seconds:.0f} s, ok={report['ok']}; busbw at the largest size (GB/s): "
          f"{result['largest_size_busbw_gbps']}")
    for failure in report["failures"]:
        print(f"FAILED {failure}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
