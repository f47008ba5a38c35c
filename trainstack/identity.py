"""What names an image and where things are inside it: image references, the label prefix of every
label trainstack sets, and the in-image paths that the Dockerfile, the verification, the examples'
commands and the local pool use. The templates' YAML and trainrun's doctor, which cannot import the
host tooling, spell the two paths they need themselves; unit tests hold them to these."""
from __future__ import annotations

import re

from trainstack.errors import bad_value

# Docker's reference grammar (distribution/reference): [HOST[:PORT]/]NAME[/NAME...][:TAG].
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?")

LABEL_PREFIX = "io.trainstack"
FLAVOR_LABEL = f"{LABEL_PREFIX}.flavor"
POOL_LABEL = f"{LABEL_PREFIX}.pool"
POOL_ROLE_LABEL = f"{POOL_LABEL}.role"
POOL_SHARE_LABEL = f"{POOL_LABEL}.share"

VENV_DIR = "/opt/venv"
MANIFEST_PATH = "/etc/trainstack/manifest.json"
CONSTRAINTS_PATH = "/etc/trainstack/constraints.txt"
EXAMPLES_DIR = "/opt/trainstack/examples"
DISCOVERY_SCRIPT_PATH = "/opt/trainstack/discover-gpus.sh"


def image_reference(image_name: str, tag: str, registry: str | None = None) -> str:
    """NAME:TAG, or REGISTRY/NAME:TAG."""
    return f"{registry}/{image_name}:{tag}" if registry else f"{image_name}:{tag}"


def flavor_image(flavor: str, registry: str | None = None) -> str:
    """The reference `invoke build` tags a flavor with (image name from the matrix), e.g. trainstack:cpu."""
    from trainstack.matrix import load_matrix

    return image_reference(load_matrix().image_name, flavor, registry)


def check_reference(option: str, value: str) -> str:
    """`value` if it is a docker image reference NAME[:TAG]; else the error, before any docker call."""
    if not REFERENCE.fullmatch(value):
        raise bad_value(option, value, "is not a docker image reference",
                        "[REGISTRY/]NAME[:TAG] in lower case, e.g. trainstack:cpu or localhost:5000/trainstack:cpu")
    return value
