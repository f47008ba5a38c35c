"""What each group of the training libraries adds to an image, in bytes on disk: run inside the image (through
in_image.result_from_image) by image_build.py's size measurement.

A group's cost is the installed files (each distribution's RECORD, and the byte-compiled file beside each .py) of
the distributions its packages need, leaving out what the rest of the image needs anyway (the closure of every
distribution no group reaches, and of the flavor's other pins, given as --pinned) and what an earlier group
already counted. So the order of GROUPS decides who pays
for a shared dependency: scipy is the plots-and-metrics group's (scikit-learn's) and not MLflow's.

    python dependency_groups.py --pinned pandas pyarrow ... --out result.json
"""
from __future__ import annotations

import argparse
import importlib.metadata as metadata
import importlib.util
import json
import re
from pathlib import Path

# Issue 37's groups, each by the packages it adds; a group's dependencies come with it.
GROUPS = {
    "plots-and-metrics": ["matplotlib", "scikit-learn"],
    "lightning": ["lightning", "pytorch-lightning", "torchmetrics"],
    "hugging-face": ["transformers", "accelerate", "peft", "safetensors", "tokenizers", "datasets"],
    "mlflow": ["mlflow"],
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, metadata.Distribution]:
    return {canonical(dist.metadata["Name"]): dist for dist in metadata.distributions()}


def requirements(dist: metadata.Distribution) -> list[str]:
    """The names a distribution requires unconditionally (no extra, or a marker this Python meets)."""
    from packaging.requirements import Requirement

    names = []
    for line in dist.requires or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            names.append(canonical(requirement.name))
    return names


def closure(roots: list[str], dists: dict[str, metadata.Distribution]) -> set[str]:
    seen: set[str] = set()
    pending = [canonical(root) for root in roots]
    while pending:
        name = pending.pop()
        if name in seen or name not in dists:
            continue
        seen.add(name)
        pending += requirements(dists[name])
    return seen


def installed_bytes(dist: metadata.Distribution) -> int:
    """The distribution's files; a RECORD may or may not list the .pyc of each .py, so each file counts once."""
    paths = set()
    for file in dist.files or []:
        path = Path(dist.locate_file(file))
        paths.add(path)
        if path.suffix == ".py":
            paths.add(Path(importlib.util.cache_from_source(str(path))))
    return sum(path.stat().st_size for path in paths if path.is_file() and not path.is_symlink())


def group_sizes(pinned: list[str]) -> dict[str, dict]:
    dists = installed()
    reached = closure([name for names in GROUPS.values() for name in names], dists)
    counted = closure([name for name in dists if name not in reached] + pinned, dists)
    sizes = {}
    for group, roots in GROUPS.items():
        added = sorted(closure(roots, dists) - counted)
        counted |= set(added)
        sizes[group] = {"gb": round(sum(installed_bytes(dists[name]) for name in added) / 1e9, 3),
                        "distributions": added}
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pinned", nargs="*", default=[], help="the flavor's pins outside the groups")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    Path(args.out).write_text(json.dumps(group_sizes(args.pinned), indent=2) + "\n")


if __name__ == "__main__":
    main()
