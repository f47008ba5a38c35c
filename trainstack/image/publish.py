"""Pushes a built flavor to a registry under the tags derived from its contents.

The manifest and the SBOM are files in the image (/etc/trainstack/), so each pushed tag, being the same image,
carries both: `docker run --rm REF cat /etc/trainstack/sbom.cdx.json` (or `invoke sbom --image REF`) reads the
SBOM of any pushed tag. An image without them (built before they existed) is not pushed.
"""
from __future__ import annotations

import json

import docker.errors

from pooltemplates.targets.k8s import REGISTRY, REGISTRY_VALID
from trainrun.image_contract import MANIFEST_PATH, SBOM_PATH
from trainstack import docker_client
from trainstack.console import report
from trainstack.errors import TrainstackError, bad_value
from trainstack.image.naming import image_reference, image_tags
from trainstack.image.sbom import read_image_sbom

LAYER_DONE = ("Pushed", "Layer already exists", "Mounted from")


def push_flavor(image_name: str, flavor: str, registry: str) -> list[str]:
    """Tags `image_name:flavor` as REGISTRY/image_name:{content tag, flavor} and pushes both."""
    if not REGISTRY.fullmatch(registry):
        raise bad_value("--registry", registry, "is not a registry", REGISTRY_VALID)
    client = docker_client.connect()
    local = image_reference(image_name, flavor)
    try:
        image = client.images.get(local)
    except docker.errors.ImageNotFound:
        raise TrainstackError(f"push: {local} is not built here; run `invoke build --flavor {flavor}` first") from None
    status, text = docker_client.run_in_image(client, local, ["cat", MANIFEST_PATH])
    if status != 0:
        raise TrainstackError(f"push: {local} has no {MANIFEST_PATH}; rebuild it with `invoke build`")
    try:
        sbom = read_image_sbom(client, local)
    except TrainstackError as exc:
        raise TrainstackError(f"push: {exc}") from None
    report(f"push {local}: its SBOM {SBOM_PATH} ({len(sbom['components'])} components) goes with every tag")
    repository = f"{registry}/{image_name}"
    pushed = []
    for tag in image_tags(json.loads(text)):
        image.tag(repository, tag)
        reference = image_reference(image_name, tag, registry)
        for line in client.api.push(repository, tag=tag, stream=True, decode=True):
            if "error" in line:
                raise TrainstackError(f"push: {reference}: {line['error']}")
            if line.get("status") in LAYER_DONE:
                report(f"push {reference}: layer {line.get('id', '?')} {line['status'].lower()}")
        pushed.append(reference)
    return pushed
