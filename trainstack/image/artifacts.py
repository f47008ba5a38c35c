"""Artifacts pushed beside an image in its registry and referring to it (OCI 1.1's `subject`): the image's SBOM, so
that it can be read without pulling the image.

An artifact is an OCI image manifest whose artifactType names what it holds, whose config is OCI's empty descriptor
and whose one layer is the document; its subject is the image's manifest. A registry with the referrers API (OCI
distribution 1.1) lists it there and says so with an OCI-Subject header on the PUT; for one without it (Debian's
docker-registry, distribution 2.8; ghcr.io) the referrers tag schema of the OCI distribution spec is kept, as ORAS
does: an index tagged sha256-<the image digest's hex> whose descriptors are the image's referrers.
"""
from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from trainstack.errors import TrainstackError
from trainstack.image.registry import MANIFEST_TYPES, RegistryClient

SBOM_ARTIFACT_TYPE = "application/vnd.cyclonedx+json"
SBOM_TITLE = "sbom.cdx.json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_BYTES = b"{}"
TITLE_ANNOTATION = "org.opencontainers.image.title"


def descriptor(media_type: str, content: bytes, **fields: Any) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": f"sha256:{hashlib.sha256(content).hexdigest()}", "size": len(content),
            **fields}


def _canonical(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def artifact_manifest(artifact_type: str, subject: dict[str, Any], document: bytes, title: str) -> bytes:
    """The manifest of an artifact holding `document` (of media type `artifact_type`) that refers to `subject`, a
    descriptor of the image's manifest. The same document and subject give the same bytes, so pushing it again
    changes nothing."""
    return _canonical({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": descriptor(EMPTY_MEDIA_TYPE, EMPTY_BYTES, data=base64.b64encode(EMPTY_BYTES).decode()),
        "layers": [descriptor(artifact_type, document, annotations={TITLE_ANNOTATION: title})],
        "subject": subject,
    })


def referrers_tag(digest: str) -> str:
    """The referrers tag schema's tag of a manifest digest: sha256:abc... -> sha256-abc..."""
    return digest.replace(":", "-")


def with_referrer(index: bytes | None, referrer: dict[str, Any]) -> bytes:
    """The referrers index `index` (None: none yet) with `referrer` added once."""
    document = json.loads(index) if index else {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
    others = [entry for entry in document.get("manifests", []) if entry.get("digest") != referrer["digest"]]
    return _canonical({**document, "manifests": [*others, referrer]})


def push_sbom(remote: RegistryClient, name: str, image_digest: str, sbom: bytes) -> str:
    """Pushes `sbom` as an artifact referring to manifest IMAGE_DIGEST of repository NAME; the artifact's digest."""
    found = remote.manifest_bytes(name, image_digest, ", ".join(MANIFEST_TYPES))
    if found is None:
        raise TrainstackError(f"the registry {remote.host} holds no manifest {image_digest} in {name} to attach "
                              "the SBOM to")
    # mediaType is optional in an OCI manifest (and set in every docker one).
    subject = descriptor(json.loads(found[1]).get("mediaType", OCI_MANIFEST), found[1])
    remote.put_blob(name, EMPTY_BYTES)
    remote.put_blob(name, sbom)
    manifest = artifact_manifest(SBOM_ARTIFACT_TYPE, subject, sbom, SBOM_TITLE)
    entry = descriptor(OCI_MANIFEST, manifest, artifactType=SBOM_ARTIFACT_TYPE)
    digest, answer = remote.put_manifest(name, entry["digest"], manifest, OCI_MANIFEST)
    if answer.get("OCI-Subject") is None:
        tag = referrers_tag(image_digest)
        index = remote.manifest_bytes(name, tag, OCI_INDEX)
        remote.put_manifest(name, tag, with_referrer(index[1] if index else None, entry), OCI_INDEX)
    return digest


def referrers(remote: RegistryClient, name: str, image_digest: str, artifact_type: str) -> list[dict[str, Any]]:
    """The descriptors of the artifacts of type `artifact_type` that refer to manifest IMAGE_DIGEST: from the
    referrers API where the registry has it, else from the referrers tag."""
    index = remote.referrers(name, image_digest)
    if index is None:
        found = remote.manifest_bytes(name, referrers_tag(image_digest), OCI_INDEX)
        index = json.loads(found[1]) if found else {}
    return [entry for entry in index.get("manifests", []) if entry.get("artifactType") == artifact_type]


def pull_sbom(remote: RegistryClient, name: str, tag: str) -> tuple[str, bytes] | None:
    """(the image's manifest digest, its SBOM artifact's document) of NAME:TAG; None when the registry holds no
    such image or no SBOM refers to it. The newest artifact wins where several do."""
    image = remote.manifest(name, tag)
    if image is None:
        return None
    for entry in reversed(referrers(remote, name, image.digest, SBOM_ARTIFACT_TYPE)):
        found = remote.manifest_bytes(name, entry["digest"], OCI_MANIFEST)
        layers = json.loads(found[1]).get("layers", []) if found else []
        if layers:
            document = remote.blob(name, layers[0]["digest"])
            if document is not None:
                return image.digest, document
    return None
