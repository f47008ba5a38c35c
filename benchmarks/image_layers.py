"""What a pull of a trainstack image transfers: each layer's size, the bytes a pull re-sends after a change, and
whether two builds gave the same layers.

    python benchmarks/image_layers.py table [--flavor cpu] [--image REF]
    python benchmarks/image_layers.py repull --change {launcher-only,deepspeed-patch,torch-bump} [--flavor cpu]
                                             [--image REF]
    python benchmarks/image_layers.py digests --image REF --build NAME
    python benchmarks/image_layers.py pyc-check [--flavor cpu]

The images are pushed to a registry started here (Debian's docker-registry on 127.0.0.1, which docker trusts
without TLS), so the compressed sizes are the registry's: what a pull downloads. A pull re-sends the first layer
whose chain differs from the image it has and every layer above it (docker pull registers layers as a chain), so
`repull` builds the flavor's image again from a build context with one change (a line added to trainrun's
`__init__.py`; a comment reworded in DeepSpeed's patch), pushes both and sums the compressed sizes of the rebuilt
image's layers from the first one that differs. A torch bump cannot be built here (no other CPU torch wheel is
reachable): its figure is the sum from the torch layer up, which is what such a bump re-sends by the same rule.
`digests` records a build's layer diff IDs; two records of the same flavor are compared layer by layer.
`pyc-check` times, in the image, importing the frameworks with the checked-hash pycs checked (Python's default) and
not (`--check-hash-based-pycs never`), alternately: what the layers' reproducible pycs cost each process.

Each run merges its figures into benchmarks/results/image_layers.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from trainrun.image_contract import LOCAL_PACKAGE_DIRS, VENV_LAYERS_PATH
from trainstack import docker_client
from trainstack.image.build import BUILD_DIR, run_build
from trainstack.image.build_context import in_image, write_build_context
from trainstack.image.dockerfile import IMAGE_ROOT, LAYER_MTIME, STEP_START
from trainstack.image.matrix import load_matrix
from trainstack.image.naming import flavor_image
from trainstack.image.sources import sources_for

RESULTS = Path(__file__).parent / "results" / "image_layers.json"
MANIFEST_TYPES = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
LARGEST_LAYER_GOAL_GB = 5.0
LAUNCHER_ONLY_GOAL_MB = 5.0
# History rows: a COPY of a folder into / (the venv's layers among them); a #(nop) row makes a layer only for COPY or
# ADD.
ROOT_COPY = re.compile(r"#\(nop\) COPY dir:\w+ in / $")
LAYER_COMMENT = re.compile(r"#\(nop\) (COPY|ADD) ")
CHANGES = ("launcher-only", "deepspeed-patch", "torch-bump")
TORCH_BUMP = "torch-bump"
DEEPSPEED_PATCH = "deepspeed-0.19.8-portable-cpu-ops.patch"


@contextmanager
def local_registry() -> Iterator[str]:
    """Debian's docker-registry on a free loopback port, storing under a temporary folder; yields HOST:PORT."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="trainstack-layers-registry-") as folder:
        config = Path(folder) / "config.yml"
        config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {folder}/data\n"
                          f"http:\n  addr: 127.0.0.1:{port}\n")
        process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2)
                    break
                except OSError:
                    if time.monotonic() > deadline or process.poll() is not None:
                        sys.exit("error: docker-registry did not start")
                    time.sleep(0.5)
            yield f"localhost:{port}"
        finally:
            process.terminate()
            process.wait(timeout=30)


def pushed_layers(client, registry: str, image: str) -> list[dict]:
    """Pushes IMAGE to REGISTRY; returns its manifest's layers: digest and compressed size, bottom first."""
    repository, tag = f"{registry}/layers-benchmark", re.sub(r"[^\w.-]", "-", image)[:120]
    client.images.get(image).tag(repository, tag)
    try:
        for line in client.api.push(repository, tag=tag, stream=True, decode=True):
            if "error" in line:
                sys.exit(f"error: push of {image}: {line['error']}")
        host = registry.replace("localhost", "127.0.0.1")
        request = urllib.request.Request(f"http://{host}/v2/layers-benchmark/manifests/{tag}",
                                         headers={"Accept": MANIFEST_TYPES})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)["layers"]
    finally:
        client.images.remove(f"{repository}:{tag}", noprune=True)


def history_layers(client, image: str) -> list[tuple[str, int]]:
    """(what made it, its size on disk) for each of the image's layers, bottom first, from its history, whose
    metadata rows make no layer: the instruction, or, for the folders copied into / (the step script, the venv's
    layers from the image's own venv-layers.json, which lists them in order, their report and the image's files, in
    the Dockerfile's order), the folder's name."""
    status, text = docker_client.run_in_image(client, image, ["cat", VENV_LAYERS_PATH])
    venv_layers = [f"venv: {name}" for name in (json.loads(text) if status == 0 else [])]
    root_copies = iter(["step script", *venv_layers, "venv layers' report", "image files"])
    layers = []
    for row in reversed(client.api.history(image)):
        created_by = row["CreatedBy"]
        if "#(nop)" in created_by and not LAYER_COMMENT.search(created_by):
            continue
        if ROOT_COPY.search(created_by):
            name = next(root_copies)
        else:
            step = " ".join(created_by.removeprefix("/bin/sh -c ").replace("#(nop) ", "").split())
            name = step.removeprefix(f"{STEP_START} && ")[:90] or "base image"
        layers.append((name, row["Size"]))
    return layers


def layer_names(client, image: str) -> list[str]:
    return [name for name, _ in history_layers(client, image)]


def table(image: str) -> dict:
    client = docker_client.connect()
    diff_ids = client.images.get(image).attrs["RootFS"]["Layers"]
    with local_registry() as registry:
        layers = pushed_layers(client, registry, image)
    history = history_layers(client, image)
    sizes = [size for _, size in history]
    if len(sizes) != len(layers):
        sys.exit(f"error: {image}: {len(sizes)} layer rows in its history, {len(layers)} layers in its manifest")
    rows = [{"layer": name, "size_mb": round(size / 1e6, 1), "compressed_mb": round(layer["size"] / 1e6, 1),
             "diff_id": diff_id}
            for (name, size), layer, diff_id in zip(history, layers, diff_ids)]
    return {"image": image, "layers": rows, "as_pulled_mb": round(sum(layer["size"] for layer in layers) / 1e6, 1),
            "size_on_disk_gb": round(client.images.get(image).attrs["Size"] / 1e9, 3),
            "largest_layer_gb": round(max(sizes) / 1e9, 3),
            "largest_layer_compressed_gb": round(max(layer["size"] for layer in layers) / 1e9, 3),
            "largest_layer_goal_gb": LARGEST_LAYER_GOAL_GB, "meets_goal": max(sizes) / 1e9 <= LARGEST_LAYER_GOAL_GB}


def changed_context(flavor_name: str, change: str) -> Path:
    """The flavor's build context with one change made in it."""
    base = os.environ.get("TRAINSTACK_BASE_IMAGE")  # as invoke build takes it (./dev sets it)
    flavor = load_matrix().flavor(flavor_name, {"base_image": base} if base else {})
    context = write_build_context(flavor, sources_for(flavor), BUILD_DIR / f"{flavor_name}-{change}")
    if change == "launcher-only":
        module = in_image(context / IMAGE_ROOT, LOCAL_PACKAGE_DIRS["launcher"]) / "trainrun" / "__init__.py"
        with module.open("a") as text:
            text.write("# image_layers benchmark: a launcher-only change\n")
        os.utime(module, (LAYER_MTIME, LAYER_MTIME))
    else:
        patch = context / "patches" / DEEPSPEED_PATCH
        patch.write_text(patch.read_text().replace("(e.g. x86-64-v3)", "(for example x86-64-v3)", 1))
    return context


def rebuilt(flavor_name: str, change: str) -> str:
    """The flavor's image built again with one change; returns its tag."""
    client = docker_client.connect()
    started = time.monotonic()
    image_id = run_build(client, changed_context(flavor_name, change), False,
                         lambda line: print(line, end="", file=sys.stderr))
    tag = f"trainstack:{flavor_name}-layers-benchmark-{change}"
    client.images.get(image_id).tag(*tag.split(":"))
    print(f"rebuilt with the change {change} in {time.monotonic() - started:.0f} s: {tag}", file=sys.stderr)
    return tag


def repull(before: str, change: str, flavor_name: str) -> dict:
    client = docker_client.connect()
    after = before if change == TORCH_BUMP else rebuilt(flavor_name, change)
    chains = [client.images.get(image).attrs["RootFS"]["Layers"] for image in (before, after)]
    with local_registry() as registry:
        pushed_layers(client, registry, before)
        layers = pushed_layers(client, registry, after)
    names = layer_names(client, after)
    if change == TORCH_BUMP:
        first = names.index("venv: torch")
    else:
        first = next((index for index, (old, new) in enumerate(zip(*chains)) if old != new), len(chains[1]))
    resent = [{"layer": names[index], "compressed_mb": round(layers[index]["size"] / 1e6, 2),
               "same_content_as_before": chains[1][index] in chains[0]} for index in range(first, len(layers))]
    total = sum(layer["size"] for layer in layers[first:])
    return {"change": change, "before": before, "after": after, "built": change != TORCH_BUMP,
            "repulled_mb": round(total / 1e6, 2), "of_mb": round(sum(layer["size"] for layer in layers) / 1e6, 1),
            "first_changed_layer": names[first] if first < len(names) else None, "layers_resent": resent}


def digests(image: str, build: str) -> dict:
    client = docker_client.connect()
    diff_ids = client.images.get(image).attrs["RootFS"]["Layers"]
    return {"image": image, "build": build,
            "layers": [{"layer": name, "diff_id": diff_id}
                       for name, diff_id in zip(layer_names(client, image), diff_ids)]}


PYC_CHECK_IMPORTS = "import torch, tensorflow, horovod.torch, pyspark.ml.torch.distributor, deepspeed"
PYC_CHECK_SCRIPT = f"""
import json, statistics, subprocess, time
times = {{"checked": [], "unchecked": []}}
for _ in range(5):
    for case, mode in (("checked", "default"), ("unchecked", "never")):
        start = time.perf_counter()
        subprocess.run(["python", "--check-hash-based-pycs", mode, "-c", {PYC_CHECK_IMPORTS!r}], capture_output=True,
                       check=True)
        times[case].append(time.perf_counter() - start)
print(json.dumps({{case: round(statistics.median(values), 3) for case, values in times.items()}}))
"""


def pyc_check(image: str) -> dict:
    status, output = docker_client.run_in_image(docker_client.connect(), image, ["python", "-c", PYC_CHECK_SCRIPT])
    if status != 0:
        sys.exit(f"error: {image}: {output.strip()[-500:]}")
    medians = json.loads(output.strip().splitlines()[-1])
    return {"image": image, "imports": PYC_CHECK_IMPORTS, "median_s": medians,
            "checked_over_unchecked": round(medians["checked"] / medians["unchecked"], 3)}


def compare_builds(records: dict) -> dict:
    """Layer by layer, whether two recorded builds of a flavor gave the same diff ID."""
    first, second = list(records.values())[-2:]
    return {"builds": [first["build"], second["build"]],
            "layers": [{"layer": one["layer"], "same": one["diff_id"] == two["diff_id"]}
                       for one, two in zip(first["layers"], second["layers"])]}


def merge_result(path: list[str], value: dict) -> dict:
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    node = results
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    table_parser = commands.add_parser("table")
    table_parser.add_argument("--flavor", default="cpu")
    table_parser.add_argument("--image")
    repull_parser = commands.add_parser("repull")
    repull_parser.add_argument("--change", required=True, choices=CHANGES)
    repull_parser.add_argument("--flavor", default="cpu")
    repull_parser.add_argument("--image", help="the image before the change (default: the flavor's)")
    digests_parser = commands.add_parser("digests")
    digests_parser.add_argument("--image", required=True)
    digests_parser.add_argument("--build", required=True)
    digests_parser.add_argument("--flavor", default="cpu")
    pyc_parser = commands.add_parser("pyc-check")
    pyc_parser.add_argument("--flavor", default="cpu")
    args = parser.parse_args()
    if args.command == "table":
        result = table(args.image or flavor_image(args.flavor))
        merge_result([args.flavor, "table"], result)
    elif args.command == "repull":
        result = repull(args.image or flavor_image(args.flavor), args.change, args.flavor)
        merge_result([args.flavor, "repull", args.change], result)
    elif args.command == "pyc-check":
        result = pyc_check(flavor_image(args.flavor))
        merge_result([args.flavor, "pyc_check"], result)
    else:
        result = digests(args.image, args.build)
        results = merge_result([args.flavor, "builds", args.build], result)
        if len(results[args.flavor]["builds"]) >= 2:
            merge_result([args.flavor, "builds_compared"], compare_builds(results[args.flavor]["builds"]))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
