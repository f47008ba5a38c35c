"""The SBOM artifact `invoke push` puts beside an image (trainstack.image.artifacts): its manifest, golden, with OCI's
empty config and the image as its subject; the referrers tag and index of registries without the referrers API; how
`invoke sbom --image` tells a registry reference from a local name."""
import json
from pathlib import Path

import pytest

from trainstack.image.artifacts import (
    OCI_INDEX,
    OCI_MANIFEST,
    SBOM_ARTIFACT_TYPE,
    SBOM_TITLE,
    artifact_manifest,
    descriptor,
    referrers_tag,
    with_referrer,
)
from trainstack.image.naming import ATTACHMENT_TAG, TAG, split_reference
from trainstack.image.signing import signature_tag

GOLDEN = Path(__file__).parent / "golden" / "sbom-artifact.json"
SUBJECT = descriptor("application/vnd.docker.distribution.manifest.v2+json", b'{"schemaVersion":2}')
SBOM = b'{"bomFormat":"CycloneDX"}'


def test_the_artifact_manifest_is_golden_and_refers_to_the_image():
    manifest = artifact_manifest(SBOM_ARTIFACT_TYPE, SUBJECT, SBOM, SBOM_TITLE)
    assert manifest == GOLDEN.read_bytes()
    document = json.loads(manifest)
    # OCI image-spec 1.1's empty descriptor, the config of an artifact that has none.
    assert document["config"]["digest"] == "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    assert document["subject"] == SUBJECT
    assert document["layers"] == [descriptor(SBOM_ARTIFACT_TYPE, SBOM,
                                             annotations={"org.opencontainers.image.title": SBOM_TITLE})]
    assert artifact_manifest(SBOM_ARTIFACT_TYPE, SUBJECT, SBOM, SBOM_TITLE) == manifest  # a re-push is the same


def test_the_referrers_tag_and_index():
    digest = "sha256:" + "ab" * 32
    assert referrers_tag(digest) == "sha256-" + "ab" * 32
    # Tags, but of what stands beside the image: `invoke pull` does not offer them as images.
    assert all(TAG.fullmatch(tag) and ATTACHMENT_TAG.fullmatch(tag)
               for tag in (referrers_tag(digest), signature_tag(digest)))
    assert not ATTACHMENT_TAG.fullmatch("cpu-py3.11-torch2.13-tf2.21-hvd0.28.1")
    first = descriptor(OCI_MANIFEST, b"first", artifactType=SBOM_ARTIFACT_TYPE)
    second = descriptor(OCI_MANIFEST, b"second", artifactType="application/spdx+json")
    index = with_referrer(None, first)
    assert json.loads(index) == {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [first]}
    assert with_referrer(index, first) == index
    assert json.loads(with_referrer(index, second))["manifests"] == [first, second]


@pytest.mark.parametrize(("reference", "parts"), [
    ("trainstack:cpu", (None, "trainstack", "cpu")),
    ("trainstack", (None, "trainstack", "latest")),
    ("org/trainstack:cpu", (None, "org/trainstack", "cpu")),
    ("127.0.0.1:5000/trainstack/sbom:cpu", ("127.0.0.1:5000", "trainstack/sbom", "cpu")),
    ("localhost/trainstack", ("localhost", "trainstack", "latest")),
    ("ghcr.io/trainstack/trainstack:cpu-py3.11", ("ghcr.io", "trainstack/trainstack", "cpu-py3.11")),
])
def test_split_reference_reads_the_registry_as_docker_does(reference, parts):
    assert split_reference(reference) == parts
