"""The pull users do: `invoke push` of a built flavor to a registry on this machine (Debian's docker-registry with TLS
from a test CA and basic auth), then a pull by its immutable tag into a throwaway dockerd that holds no layer, timed,
then by digest, `trainrun doctor` and the 2-rank training of `invoke train` in the pulled image; the SBOM pushed
beside the image is read back from the registry, as `invoke sbom --image` reads it.

    python benchmarks/registry_pull.py [--flavor cpu]

Writes a scratch file, or with --update-results benchmarks/results/registry_pull.json (benchmarks/results_file.py):
the image (tags, id, size), the push's seconds (and the second push's, which uploads nothing), the pull's bytes (the
compressed layers its manifest lists, all downloaded since the daemon held none) and seconds, and the exit codes of
the doctor and the training. Runs as root (a second dockerd, the CA in /etc/docker/certs.d); the main daemon's
images and build cache stay as they were. The registry is on loopback, so the seconds are the machine's
(compression, upload, download, extraction), not a network's.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from registries import push_and_pull  # noqa: E402
import results_file  # noqa: E402

from trainstack import docker_client  # noqa: E402
from trainstack.image.matrix import load_matrix  # noqa: E402
from trainstack.image.naming import flavor_image  # noqa: E402
from trainstack.image.sbom import image_sbom_text  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "registry_pull.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flavor", default="cpu")
    results_file.add_options(parser, "registry_pull.json")
    args = parser.parse_args()
    args.out = results_file.chosen(args, "registry_pull.json")
    matrix = load_matrix()
    flavor = matrix.flavor(args.flavor).name
    client = docker_client.connect()
    image = client.images.get(flavor_image(flavor))
    load_at_start = round(os.getloadavg()[0], 2)
    started = datetime.now(timezone.utc)
    with tempfile.TemporaryDirectory(prefix="registry-pull-") as folder:
        run = push_and_pull(matrix.image_name, flavor, Path(folder))
    result = {
        "benchmark": "docker pull from a registry into a daemon holding no layer of the image",
        "image": {"tag": flavor_image(flavor), "id": image.id, "size_bytes": image.attrs["Size"],
                  "revision": image.labels.get("org.opencontainers.image.revision")},
        "registry": "docker-registry (Debian, distribution 2.8) on 127.0.0.1, TLS from a test CA, htpasswd basic auth",
        "daemons": "push from this machine's dockerd; pull into a throwaway dockerd (own data root), docker "
                   f"{client.version()['Version']}",
        "measured_at": started.isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "load_average_1m": {"start": load_at_start, "end": round(os.getloadavg()[0], 2)},
        "pushed": [reference.partition("/")[2] for reference in run.pushed.references],
        "push_seconds": round(run.push_seconds, 1),
        "second_push_seconds": round(run.repush_seconds, 1),
        "sbom_from_the_registry": {"read_from": run.sbom[0], "components": len(run.sbom[1]["components"]),
                                   "is_the_images": run.sbom[1] == json.loads(image_sbom_text(client, image.id))},
        "pull": {
            "by": "immutable tag",
            "bytes": run.by_tag.layer_bytes,
            "seconds": round(run.pull_seconds, 1),
            "megabytes_per_second": round(run.by_tag.layer_bytes / run.pull_seconds / 1e6, 1),
        },
        "pulled_by_digest_is_the_same_image": run.by_digest.image_id == run.by_tag.image_id == image.id,
        "doctor_exit_code": run.doctor[0],
        "training": {"command": "invoke train's (trainrun mpi -np 2, the Horovod + PyTorch example), network none",
                     "exit_code": run.training[0], "seconds": round(run.training_seconds, 1),
                     "result": next((line.partition(":")[2] for line in run.training[1].splitlines()
                                     if '"ranks"' in line), None)},
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return 0 if run.doctor[0] == 0 and run.training[0] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
