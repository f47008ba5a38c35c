"""Image benchmarks: size against its target, warm rebuild after a launcher-only change, cold build.

    python benchmarks/image_build.py size [--flavor cpu]
    python benchmarks/image_build.py warm-rebuild [--flavor cpu]
    python benchmarks/image_build.py cold [--flavor cpu]      # --no-cache: about 20 minutes on 2 cores

The size measurement also gives what each group of training libraries adds (benchmarks/dependency_groups.py).

A cold build also records its peak disk and memory: the most the docker data root's filesystem and the
machine's memory in use (MemTotal - MemAvailable) grew over what they held when the build started, sampled
every 2 seconds. Every layer of a --no-cache build is new, so the disk figure is what a machine without the
layers needs for the build (the base image aside).

Each run merges its figures into benchmarks/results/image_build.json. Build options come from
the same TRAINSTACK_* variables as `invoke build` (./dev sets them).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

from dependency_groups import GROUPS
from in_image import result_from_image
from trainstack import docker_client
from trainstack.image.build import BUILD_DIR, run_build
from trainstack.image.build_context import write_build_context
from trainstack.image.build_timing import record_result
from trainstack.image.matrix import load_matrix
from trainstack.image.naming import flavor_image
from trainstack.image.sources import sources_for

SIZE_TARGETS_GB = {"cpu": 4.0, "gpu": 10.4, "gpu-cu13": 7.1}  # issue 53, with Ray
WARM_REBUILD_TARGET_S = 60.0


def _flavor(name: str):
    base = os.environ.get("TRAINSTACK_BASE_IMAGE")
    return load_matrix().flavor(name, {"base_image": base} if base else {})


def measure_size(flavor: str) -> dict:
    client = docker_client.connect()
    image = client.images.get(flavor_image(flavor))
    size_gb = image.attrs["Size"] / 1e9
    layers = client.api.history(image.id)
    largest = sorted(layers, key=lambda layer: layer["Size"], reverse=True)[:5]
    return {
        "size_gb": round(size_gb, 3),
        "target_gb": SIZE_TARGETS_GB[flavor],
        "meets_target": size_gb <= SIZE_TARGETS_GB[flavor],
        "largest_layers": [{"size_gb": round(l["Size"] / 1e9, 3), "created_by": l["CreatedBy"][-120:]} for l in largest],
        "largest_in_site_packages_gb": _largest_in_site_packages(client, image.id, _flavor(flavor)),
        "added_by_group": _added_by_group(image.id, _flavor(flavor)),
    }


def _added_by_group(image_id: str, flavor) -> dict[str, dict]:
    """What each group of training libraries adds (benchmarks/dependency_groups.py, run in the image)."""
    grouped = {name for names in GROUPS.values() for name in names}
    pinned = [name for name in flavor.python_packages if name not in grouped]
    return result_from_image(image_id, "dependency_groups.py", ["--pinned", *pinned], timeout=300)


def _largest_in_site_packages(client, image_id: str, flavor) -> dict[str, float]:
    """The ten largest folders of site-packages, nvidia/ split by wheel (du counts each file once, so nvidia/*/ first)."""
    command = ["sh", "-c", f"cd {flavor.site_packages} && du -s --block-size=1 nvidia/*/ */ 2>/dev/null"]
    _, output = docker_client.run_in_image(client, image_id, command)
    sizes = {}
    for line in output.splitlines():
        size, _, folder = line.partition("\t")
        if size.isdigit() and folder.rstrip("/") != "nvidia":
            sizes[folder.rstrip("/")] = int(size)
    largest = sorted(sizes.items(), key=lambda item: item[1], reverse=True)[:10]
    return {folder: round(size / 1e9, 3) for folder, size in largest}


def _memory_in_use() -> int:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return (int(fields["MemTotal"].split()[0]) - int(fields["MemAvailable"].split()[0])) * 1024


class PeakGrowth:
    """Samples disk use of the docker data root's filesystem and memory in use, from start to stop; keeps the
    largest growth of each over its value at the start."""

    def __init__(self, data_root: str, interval: float = 2.0):
        self.data_root, self.interval = data_root, interval
        self.disk_start, self.memory_start = shutil.disk_usage(data_root).used, _memory_in_use()
        self.disk_peak = self.memory_peak = 0
        self._stopped = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stopped.wait(self.interval):
            self.disk_peak = max(self.disk_peak, shutil.disk_usage(self.data_root).used - self.disk_start)
            self.memory_peak = max(self.memory_peak, _memory_in_use() - self.memory_start)

    def stop(self) -> dict:
        self._stopped.set()
        self._sampler.join()
        return {"peak_disk_growth_gb": round(self.disk_peak / 1e9, 2),
                "peak_memory_growth_gb": round(self.memory_peak / 1e9, 2)}


def _timed_build(flavor_name: str, no_cache: bool, touch_launcher: bool) -> tuple[float, dict]:
    """Seconds the build took, and its PeakGrowth figures."""
    flavor = _flavor(flavor_name)
    context = write_build_context(flavor, sources_for(flavor), BUILD_DIR / f"bench-{flavor.name}")
    if touch_launcher:
        (context / "launcher" / "BENCHMARK_CHANGE").write_text(str(time.time()))
    client = docker_client.connect()
    growth = PeakGrowth(client.info()["DockerRootDir"])
    started = time.monotonic()
    image_id = run_build(client, context, no_cache, progress=lambda line: print(line, end="", file=sys.stderr))
    elapsed = time.monotonic() - started
    peaks = growth.stop()
    client.images.remove(image_id, noprune=True)
    return elapsed, peaks


def measure_warm_rebuild(flavor: str) -> dict:
    _timed_build(flavor, no_cache=False, touch_launcher=False)  # make sure every layer is cached
    seconds, _ = _timed_build(flavor, no_cache=False, touch_launcher=True)
    return {"seconds": round(seconds, 1), "target_s": WARM_REBUILD_TARGET_S, "meets_target": seconds <= WARM_REBUILD_TARGET_S}


def measure_cold_build(flavor: str) -> dict:
    seconds, peaks = _timed_build(flavor, no_cache=True, touch_launcher=False)
    return {"seconds": round(seconds, 1), "cores": os.cpu_count(), **peaks,
            "memory_total_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1)}


def record(flavor: str, kind: str, figures: dict) -> None:
    print(json.dumps({flavor: {kind: record_result(flavor, kind, figures)}}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["size", "warm-rebuild", "cold"])
    parser.add_argument("--flavor", default="cpu")
    args = parser.parse_args()
    measure = {"size": measure_size, "warm-rebuild": measure_warm_rebuild, "cold": measure_cold_build}[args.kind]
    record(args.flavor, args.kind, measure(args.flavor))


if __name__ == "__main__":
    main()
