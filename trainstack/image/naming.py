"""What names an image: image references and their grammar, the tags a built image gets (its immutable tag, its
content tag, its flavor's), the name CI publishes it under, and the label prefix of every label trainstack sets. Where things are inside an image
is trainrun.image_contract's."""
from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from packaging.version import Version

from trainstack.errors import bad_value
from trainstack.image.matrix import Flavor, load_matrix

# Docker's reference grammar (distribution/reference): [HOST[:PORT]/]NAME[/NAME...][:TAG].
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?")

TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# Tags of what stands beside an image rather than images: the referrers tag schema's index (the SBOM artifact) and
# cosign's signatures, sha256-<hex of the image digest>[.sig].
ATTACHMENT_TAG = re.compile(r"sha256-[0-9a-f]{64}(?:\.sig)?")

# The images' source label; its account publishes them: CI pushes to ghcr.io/${{ github.repository_owner }}
# (trainstack.image.published_images).
PROJECT_URL = "https://github.com/trainstack/trainstack"
OWNER, REPOSITORY = PROJECT_URL.removeprefix("https://github.com/").split("/")
GHCR_NAMESPACE = f"ghcr.io/{OWNER}"

LABEL_PREFIX = "io.trainstack"
FLAVOR_LABEL = f"{LABEL_PREFIX}.flavor"
# The clusters' labels (trainstack/clusters) are io.trainstack.pool and io.trainstack.nodes.
# The OCI labels every build sets (trainstack/image/build.py), from which the immutable tag is made.
CREATED_LABEL = "org.opencontainers.image.created"
REVISION_LABEL = "org.opencontainers.image.revision"
CREATED_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
DATE_FORMAT = "%Y.%m.%d"
SHORT_REVISION = 7
# A git commit: 40 hex digits (SHA-1) or 64 (SHA-256 repositories).
_REVISION = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def image_reference(image_name: str, tag: str, registry: str | None = None) -> str:
    """NAME:TAG, or REGISTRY/NAME:TAG; NAME@DIGEST where `tag` is a digest."""
    repository = f"{registry}/{image_name}" if registry else image_name
    return f"{repository}@{tag}" if DIGEST.fullmatch(tag) else f"{repository}:{tag}"


def registry_repository(registry: str, image_name: str) -> tuple[str, str]:
    """(HOST[:PORT], the repository's name there) of REGISTRY/IMAGE_NAME: ghcr.io/org, trainstack ->
    (ghcr.io, org/trainstack)."""
    host, _, path = registry.partition("/")
    return host, f"{path}/{image_name}" if path else image_name


def split_reference(reference: str) -> tuple[str | None, str, str]:
    """(the registry's HOST[:PORT], or None for docker's default one; the repository; the tag, latest when none) of
    a reference REFERENCE matches. As docker reads it, a first component with a dot or a port, or localhost, is a
    registry: localhost:5000/trainstack:cpu -> (localhost:5000, trainstack, cpu)."""
    first, slash, rest = reference.partition("/")
    host = first if slash and ("." in first or ":" in first or first == "localhost") else None
    path = rest if host else reference
    name, colon, tag = path.rpartition(":") if ":" in path else (path, "", "")
    return host, name, tag if colon else "latest"


def flavor_image(flavor: str, registry: str | None = None) -> str:
    """The reference `invoke build` tags a flavor with (image name from the matrix), e.g. trainstack:cpu."""
    return image_reference(load_matrix().image_name, flavor, registry)


def published_image(flavor: str) -> str:
    """The reference CI publishes a flavor under, e.g. ghcr.io/trainstack/trainstack:cpu, which the pages name and
    `invoke build` also tags a published flavor with."""
    return image_reference(load_matrix().image_name, flavor, GHCR_NAMESPACE)


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


def matrix_manifest(flavor: Flavor) -> dict[str, Any]:
    """What the tags read of a manifest, as a build of the matrix's flavor records it."""
    packages = {name: flavor.version(name) for name in ("torch", "tensorflow", "horovod") if flavor.version(name)}
    return {"flavor": flavor.name, "python": flavor.version("python"), "packages": packages,
            "libraries": {"cuda": flavor.version("cuda")}}


def immutable_tag(manifest: dict[str, Any], labels: dict[str, str]) -> str | None:
    """The content tag, the build's date and its commit, e.g. cpu-py3.11-torch2.13-tf2.21-hvd0.28.1-2026.11.26-01a534e:
    a tag that names one build and never moves. An image without a revision label (built outside a git checkout)
    gets none (None): nothing would tell two such builds of one day apart, and `invoke push` refuses it."""
    revision = labels.get(REVISION_LABEL)
    if revision is None:
        return None
    if not _REVISION.fullmatch(revision):
        raise bad_value(f"label {REVISION_LABEL}", revision, "is not a git commit", "40 or 64 lower-case hex digits")
    created = labels.get(CREATED_LABEL, "")
    try:
        date = datetime.strptime(created, CREATED_FORMAT).strftime(DATE_FORMAT)
    except ValueError:
        raise bad_value(f"label {CREATED_LABEL}", created, "is not the build's time",
                        "UTC as YYYY-MM-DDTHH:MM:SSZ, as `invoke build` sets it") from None
    return f"{content_tag(manifest)}-{date}-{revision[:SHORT_REVISION]}"


def image_tags(manifest: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """The tags of a built image, from what its manifest says it holds and its labels: the immutable tag (where it
    has one), then the content tag and the flavor's, which move to each newer build. Pushed in this order, so a
    registry never shows a moving tag before the image's every layer and its immutable tag are there, and a push that
    fails leaves the moving tags on the image they named."""
    floating = [content_tag(manifest), manifest["flavor"]]
    immutable = immutable_tag(manifest, labels)
    return [immutable, *floating] if immutable else floating


def _major_minor(version: str) -> str:
    release = Version(version).release
    return f"{release[0]}.{release[1]}"


def check_reference(option: str, value: str) -> str:
    """`value` if it is a docker image reference NAME[:TAG]; else the error, before any docker call."""
    if not REFERENCE.fullmatch(value):
        raise bad_value(option, value, "is not a docker image reference",
                        "[REGISTRY/]NAME[:TAG] in lower case, e.g. trainstack:cpu or localhost:5000/trainstack:cpu")
    return value


def check_tag(option: str, value: str) -> str:
    """`value` if it is a tag or a sha256 digest; else the error, before any docker call."""
    if not (TAG.fullmatch(value) or DIGEST.fullmatch(value)):
        raise bad_value(option, value, "is not a tag or a digest",
                        "a tag such as cpu or cpu-py3.11-torch2.13-tf2.21-hvd0.28.1-2026.11.26-01a534e, or sha256:<64 hex>")
    return value
