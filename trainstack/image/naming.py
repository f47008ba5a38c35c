"""What names an image: image references and their grammar, the tags a built image gets (its content tag, its
flavor's), and the label prefix of every label trainstack sets. Where things are inside an image is
trainrun.image_contract's."""
from __future__ import annotations

import re
from typing import Any

from packaging.version import Version

from trainstack.errors import bad_value
from trainstack.image.matrix import load_matrix

# Docker's reference grammar (distribution/reference): [HOST[:PORT]/]NAME[/NAME...][:TAG].
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?")

LABEL_PREFIX = "io.trainstack"
FLAVOR_LABEL = f"{LABEL_PREFIX}.flavor"
# The clusters' labels (trainstack/clusters) are io.trainstack.pool and io.trainstack.nodes.



def image_reference(image_name: str, tag: str, registry: str | None = None) -> str:
    """NAME:TAG, or REGISTRY/NAME:TAG."""
    return f"{registry}/{image_name}:{tag}" if registry else f"{image_name}:{tag}"


def flavor_image(flavor: str, registry: str | None = None) -> str:
    """The reference `invoke build` tags a flavor with (image name from the matrix), e.g. trainstack:cpu."""
    return image_reference(load_matrix().image_name, flavor, registry)


def content_tag(manifest: dict[str, Any]) -> str:
    """A tag that says what is inside, e.g. cpu-py3.11-torch2.13-tf2.21-hvd0.28.1."""
    packages = manifest["packages"]
    parts = [manifest["flavor"]]
    cuda = manifest["libraries"].get("cuda")
    if cuda:
        parts.append(f"cuda{_major_minor(cuda)}")
    parts.append(f"py{_major_minor(manifest['python'])}")
    parts.append(f"torch{_major_minor(packages['torch'])}")
    tensorflow = packages.get("tensorflow") or packages.get("tensorflow-cpu")
    if tensorflow:
        parts.append(f"tf{_major_minor(tensorflow)}")
    parts.append(f"hvd{packages['horovod']}")
    return "-".join(parts)


def image_tags(manifest: dict[str, Any]) -> list[str]:
    """The tags of a built image, from what its manifest says it holds: the content tag, which never moves,
    then the flavor's (pushed in this order, a registry never shows the moving tag alone)."""
    return [content_tag(manifest), manifest["flavor"]]


def _major_minor(version: str) -> str:
    release = Version(version).release
    return f"{release[0]}.{release[1]}"


def check_reference(option: str, value: str) -> str:
    """`value` if it is a docker image reference NAME[:TAG]; else the error, before any docker call."""
    if not REFERENCE.fullmatch(value):
        raise bad_value(option, value, "is not a docker image reference",
                        "[REGISTRY/]NAME[:TAG] in lower case, e.g. trainstack:cpu or localhost:5000/trainstack:cpu")
    return value
