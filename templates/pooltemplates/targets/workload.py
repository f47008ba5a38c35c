"""What every target that runs the image shares: the image's reference (the matrix's image in a registry, or the
user's, checked against docker's grammar) and the training script with its arguments."""
from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from .. import image_contract
from ..errors import Problem, TemplateError
from ..schema import PoolTemplate

IMAGE_NAME = "trainstack"
# The content tags `invoke push` gives the matrix's flavors (trainstack.image.naming.content_tag), which
# never move; tests/unit/templates/test_kubernetes.py holds them to images/matrix.yaml.
IMAGE_TAGS = {
    "cpu": "cpu-py3.11-torch2.13-tf2.21-hvd0.28.1",
    "gpu": "gpu-cuda12.8-py3.11-torch2.10-tf2.20-hvd0.28.1",
}
DEFAULT_REGISTRY = "localhost:5000"
# Docker's reference grammar (distribution/reference): a registry HOST[:PORT][/PATH], and a whole image
# reference [REGISTRY/]NAME[/NAME...][:TAG]. trainstack.image.naming.REFERENCE is the host tooling's copy of the
# latter (a unit test holds them equal); `invoke push --registry` checks this REGISTRY.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REGISTRY = re.compile(rf"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?(?:/{_COMPONENT})*")
REGISTRY_VALID = "HOST[:PORT][/PATH], e.g. localhost:5000, registry.example:5000 or ghcr.io/org"
REFERENCE = re.compile(rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?")


def image_reference(template: PoolTemplate, image: str | None, registry: str | None) -> str:
    """`image`, else the matrix's cpu or gpu image in `registry` under its content tag; refused (TemplateError)
    where either is not what docker and Kubernetes read."""
    problems = []
    if image is not None and not REFERENCE.fullmatch(image):
        problems.append(Problem("image", image, "is not a docker image reference",
                                "[REGISTRY/]NAME[:TAG] in lower case, e.g. localhost:5000/trainstack:cpu"))
    if registry is not None and not REGISTRY.fullmatch(registry):
        problems.append(Problem("registry", registry, "is not a registry", REGISTRY_VALID))
    if problems:
        raise TemplateError(f"render {template.name!r}", problems)
    flavor = "gpu" if template.uses_gpus and not template.gpu.placeholders else "cpu"
    return image or f"{registry or DEFAULT_REGISTRY}/{IMAGE_NAME}:{IMAGE_TAGS[flavor]}"


def script_words(template: PoolTemplate, target: str, script: str | None, default: Iterable[str]) -> list[str]:
    """The training script and its arguments, split as a shell would; `default` when none is given."""
    if script is None:
        return list(default)
    try:
        words = shlex.split(script)
    except ValueError as exc:
        words, why = [], f"does not split into words: {exc}"
    else:
        why = "names no script"
    if not words:
        raise TemplateError(f"render {template.name!r} for {target}", [Problem(
            "script", script, why,
            f"a script path and its arguments, e.g. '{image_contract.IMAGE_HOME}/train.py --epochs 3'")])
    return words
