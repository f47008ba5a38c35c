"""Pushes a built flavor to a registry under its tags (trainstack.image.naming.image_tags), and pulls one back.

The manifest and the SBOM are files in the image (/etc/trainstack/), so each pushed tag, being the same image,
carries both: `docker run --rm REF cat /etc/trainstack/sbom.cdx.json` reads the SBOM of any pushed tag. After the
tags, the SBOM is pushed beside the image as an artifact referring to its digest (trainstack.image.artifacts), which
`invoke sbom --image REF` reads without pulling the image; then, with a key, the digest is signed
(trainstack.image.signing). An image without a manifest or SBOM (built before they existed) is not pushed.

Before the daemon pushes a layer, the registry must answer and take the credentials (trainstack.image.registry),
and the image's immutable tag must be absent there or name this very image (its manifest's config digest is the
image ID): an immutable tag is never moved, and pushing the same image again changes nothing. Two pushes racing for
one immutable tag are not caught: the registry's API has no conditional write.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import docker
import docker.errors
from docker.models.images import Image

from pooltemplates.targets.workload import REGISTRY, REGISTRY_VALID
from trainrun.image_contract import MANIFEST_PATH, SBOM_PATH
from trainstack import docker_client
from trainstack.console import report
from trainstack.errors import TrainstackError, bad_value
from trainstack.image.artifacts import pull_sbom, push_sbom
from trainstack.image.naming import (
    ATTACHMENT_TAG,
    REVISION_LABEL,
    image_reference,
    image_tags,
    immutable_tag,
    registry_repository,
    split_reference,
)
from trainstack.image.registry import RegistryClient, credentials, insecure
from trainstack.image.sbom import image_sbom_text, parse_sbom
from trainstack.image.signing import SigningKey, load_public_key, sign_image, verify_signature

LAYER_DONE = ("Pushed", "Layer already exists", "Mounted from")


@dataclass(frozen=True)
class Pushed:
    references: list[str]  # REGISTRY/NAME:TAG, in the order pushed
    digest_reference: str  # REGISTRY/NAME@sha256:..., the manifest every tag names
    sbom_reference: str | None = None  # REGISTRY/NAME@sha256:... of the SBOM artifact referring to it
    signed: bool = False


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


def push_flavor(image_name: str, flavor: str, registry: str, sign_key: SigningKey | None = None) -> Pushed:
    """Pushes `image_name:flavor` as REGISTRY/image_name under its immutable, content and flavor tags, then its SBOM
    beside it, then signs it with `sign_key` where given."""
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
        sbom_text = image_sbom_text(client, local)
        sbom = parse_sbom(sbom_text, f"{local}:{SBOM_PATH}")
    except TrainstackError as exc:
        raise TrainstackError(f"push: {exc}") from None
    report(f"push {local}: its SBOM {SBOM_PATH} ({len(sbom['components'])} components) goes with every tag")
    return push_image(client, image, registry, image_name, image_tags(manifest, image.labels), sbom_text.encode(),
                      sign_key)


def push_image(client: docker.DockerClient, image: Image, registry: str, image_name: str, tags: list[str],
               sbom: bytes | None = None, sign_key: SigningKey | None = None) -> Pushed:
    """Pushes `image` as REGISTRY/IMAGE_NAME under `tags` in their order, the first being its immutable tag, once
    the registry answered, took the credentials, and showed that tag absent or naming this image; then `sbom` as an
    artifact referring to it, then its signature with `sign_key`. A new push repeats each step without changing
    what is there, so a push that failed after the tags is completed by running it again."""
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
    done = Pushed(pushed, image_reference(image_name, digest, registry))
    after = f"(pushed before it: {', '.join(pushed)}; `invoke push` again completes it)"
    if sbom is not None:
        try:
            artifact = push_sbom(remote, name, digest, sbom)
        except TrainstackError as exc:
            raise TrainstackError(f"push: the SBOM of {done.digest_reference}: {exc} {after}") from None
        done = replace(done, sbom_reference=image_reference(image_name, artifact, registry))
        report(f"push {done.digest_reference}: its SBOM, as the artifact {done.sbom_reference}")
    if sign_key is not None:
        try:
            added = sign_image(remote, name, repository, digest, sign_key)
        except TrainstackError as exc:
            raise TrainstackError(f"push: the signature of {done.digest_reference}: {exc} {after}") from None
        done = replace(done, signed=True)
        report(f"push {done.digest_reference}: {'signed' if added else 'signed already'} with {sign_key.path}")
    return done


def pull_image(client: docker.DockerClient, registry: str, image_name: str, tag: str) -> Pulled:
    """Pulls REGISTRY/IMAGE_NAME:TAG (or @DIGEST, naming.check_tag's) once the registry showed it there; else names
    the tags it has."""
    remote = registry_client(client, check_registry(registry))
    _, name = registry_repository(registry, image_name)
    reference = image_reference(image_name, tag, registry)
    try:
        manifest = remote.manifest(name, tag)
        if manifest is None:
            tags = sorted(tag for tag in remote.tags(name) if not ATTACHMENT_TAG.fullmatch(tag))
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


def registry_sbom(client: docker.DockerClient, reference: str) -> tuple[str, dict[str, Any]]:
    """(where it came from, the SBOM) of REFERENCE, an image this engine does not hold, from the SBOM artifact
    `invoke push` put beside it in its registry: the image is not pulled."""
    host, name, tag = split_reference(reference)
    valid = "an image here (`docker images`), or REGISTRY/NAME:TAG of an image `invoke push` pushed with its SBOM"
    if host is None:
        raise bad_value("--image", reference, "is not an image here and names no registry", valid)
    try:
        found = pull_sbom(registry_client(client, host), name, tag)
    except TrainstackError as exc:
        raise TrainstackError(f"sbom: {exc}") from None
    if found is None:
        raise bad_value("--image", reference, f"is not an image here and {host} holds no SBOM of it", valid)
    digest, document = found
    origin = f"{image_reference(name, digest, host)} (the SBOM artifact referring to it)"
    return origin, parse_sbom(document.decode(), origin)


def verify_image(client: docker.DockerClient, reference: str, public_key: str) -> str:
    """The manifest digest of REFERENCE (REGISTRY/NAME:TAG) once a signature of it by the key in file `public_key`
    is found in its registry (nothing is pulled); else the error, one line."""
    key = load_public_key("--key", public_key)
    host, name, tag = split_reference(reference)
    if host is None:
        raise bad_value("--image", reference, "names no registry", "REGISTRY/NAME:TAG, e.g. ghcr.io/org/trainstack:cpu")
    return verify_signature(registry_client(client, host), name, tag, key, public_key)
