"""Pushes a built flavor to a registry under its tags (trainstack.image.naming.image_tags), and pulls one back.

The manifest and the SBOM are files in the image (/etc/trainstack/), so each pushed tag, being the same image,
carries both: `docker run --rm REF cat /etc/trainstack/sbom.cdx.json` (or `invoke sbom --image REF`) reads the
SBOM of any pushed tag. An image without them (built before they existed) is not pushed.

Before the daemon pushes a layer, the registry must answer and take the credentials (trainstack.image.registry),
and the image's immutable tag must be absent there or name this very image (its manifest's config digest is the
image ID): an immutable tag is never moved, and pushing the same image again changes nothing. Two pushes racing for
one immutable tag are not caught: the registry's API has no conditional write.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import docker
import docker.errors
from docker.models.images import Image

from pooltemplates.targets.k8s import REGISTRY, REGISTRY_VALID
from trainrun.image_contract import MANIFEST_PATH, SBOM_PATH
from trainstack import docker_client
from trainstack.console import report
from trainstack.errors import TrainstackError, bad_value
from trainstack.image.naming import (
    REVISION_LABEL,
    image_reference,
    image_tags,
    immutable_tag,
    registry_repository,
)
from trainstack.image.registry import RegistryClient, credentials, insecure
from trainstack.image.sbom import read_image_sbom

LAYER_DONE = ("Pushed", "Layer already exists", "Mounted from")


@dataclass(frozen=True)
class Pushed:
    references: list[str]  # REGISTRY/NAME:TAG, in the order pushed
    digest_reference: str  # REGISTRY/NAME@sha256:..., the manifest every tag names


@dataclass(frozen=True)
class Pulled:
    reference: str
    image_id: str
    digest_reference: str
    layer_bytes: int  # the compressed layers the registry's manifest lists


def check_registry(registry: str) -> str:
    if not REGISTRY.fullmatch(registry):
        raise bad_value("--registry", registry, "is not a registry", REGISTRY_VALID)
    return registry


def registry_client(client: docker.DockerClient, registry: str) -> RegistryClient:
    """A client of the registry that trusts and authenticates as `client`'s daemon will."""
    host, _ = registry_repository(registry, "")
    return RegistryClient(host, credentials(host), insecure(host, client.info().get("RegistryConfig") or {}))


def push_flavor(image_name: str, flavor: str, registry: str) -> Pushed:
    """Pushes `image_name:flavor` as REGISTRY/image_name under its immutable, content and flavor tags."""
    check_registry(registry)
    client = docker_client.connect()
    local = image_reference(image_name, flavor)
    try:
        image = client.images.get(local)
    except docker.errors.ImageNotFound:
        raise TrainstackError(f"push: {local} is not built here; run `invoke build --flavor {flavor}` first") from None
    status, text = docker_client.run_in_image(client, local, ["cat", MANIFEST_PATH])
    if status != 0:
        raise TrainstackError(f"push: {local} has no {MANIFEST_PATH}; rebuild it with `invoke build`")
    manifest = json.loads(text)
    if immutable_tag(manifest, image.labels) is None:
        raise TrainstackError(f"push: {local} has no {REVISION_LABEL} label (built outside a git checkout), so no "
                              "immutable tag names it; build it from a git checkout of trainstack")
    try:
        sbom = read_image_sbom(client, local)
    except TrainstackError as exc:
        raise TrainstackError(f"push: {exc}") from None
    report(f"push {local}: its SBOM {SBOM_PATH} ({len(sbom['components'])} components) goes with every tag")
    return push_image(client, image, registry, image_name, image_tags(manifest, image.labels))


def push_image(client: docker.DockerClient, image: Image, registry: str, image_name: str,
               tags: list[str]) -> Pushed:
    """Pushes `image` as REGISTRY/IMAGE_NAME under `tags` in their order, the first being its immutable tag, once
    the registry answered, took the credentials, and showed that tag absent or naming this image."""
    remote = registry_client(client, check_registry(registry))
    _, name = registry_repository(registry, image_name)
    immutable = image_reference(image_name, tags[0], registry)
    try:
        existing = remote.manifest(name, tags[0])
    except TrainstackError as exc:
        raise TrainstackError(f"push: {exc}") from None
    if existing is not None and existing.config_digest != image.id:
        raise TrainstackError(
            f"push: {immutable} already names another image in the registry (manifest {existing.digest}, image "
            f"{existing.config_digest}), not this one ({image.id}), and an immutable tag never moves; nothing was "
            f"pushed: `invoke pull --registry {registry} --tag {tags[0]}` gets that image, and a commit then "
            "`invoke build` gives this one a new immutable tag")
    repository = f"{registry}/{image_name}"
    auth = remote.credentials.auth_config() if remote.credentials else None
    pushed: list[str] = []
    digest = None
    for tag in tags:
        image.tag(repository, tag)
        reference = image_reference(image_name, tag, registry)
        for line in client.api.push(repository, tag=tag, stream=True, decode=True, auth_config=auth):
            if "error" in line:
                before = f" (pushed before it: {', '.join(pushed)})" if pushed else ""
                raise TrainstackError(f"push: {reference}: {line['error'].strip()}{before}")
            if line.get("status") in LAYER_DONE:
                report(f"push {reference}: {line.get('id', '?')}: {line['status'].lower()}")
            digest = line.get("aux", {}).get("Digest", digest)
        pushed.append(reference)
    return Pushed(pushed, image_reference(image_name, digest, registry))


def pull_image(client: docker.DockerClient, registry: str, image_name: str, tag: str) -> Pulled:
    """Pulls REGISTRY/IMAGE_NAME:TAG (or @DIGEST, naming.check_tag's) once the registry showed it there; else names
    the tags it has."""
    remote = registry_client(client, check_registry(registry))
    _, name = registry_repository(registry, image_name)
    reference = image_reference(image_name, tag, registry)
    try:
        manifest = remote.manifest(name, tag)
        if manifest is None:
            tags = sorted(remote.tags(name))
            raise bad_value("--tag", tag, f"is not in {registry}/{image_name}",
                            ", ".join(tags) if tags else "none: the registry holds no tag of it; `invoke push` first")
    except TrainstackError as exc:
        raise TrainstackError(f"pull: {exc}") from None
    auth = remote.credentials.auth_config() if remote.credentials else None
    for line in client.api.pull(f"{registry}/{image_name}", tag=tag, stream=True, decode=True, auth_config=auth):
        if "error" in line:
            raise TrainstackError(f"pull: {reference}: {line['error'].strip()}")
    image = client.images.get(reference)
    return Pulled(reference, image.id, image_reference(image_name, manifest.digest, registry), manifest.layer_bytes)

