"""The commands users get the images with (the README's first section and docs/quickstarts/get-the-images.md, made by
trainstack/image/published_images.py) name what the CI workflow publishes: the registry it pushes to, the Docker Hub
mirror with the secrets the building page documents, and the keyless signature that `cosign verify` checks."""
import re
from pathlib import Path

import pytest
import yaml

from trainstack.image import published_images as published
from trainstack.image.matrix import load_matrix

REPO = Path(__file__).resolve().parents[3]
WORKFLOW = yaml.safe_load((REPO / published.WORKFLOW_PATH).read_text(encoding="utf-8"))
PUBLISH_SCRIPT = (REPO / ".ci" / "publish").read_text(encoding="utf-8")
IMAGE_JOBS = {"cpu-image": "cpu", "gpu-image": "gpu"}


def steps(job: str) -> list[dict]:
    return WORKFLOW["jobs"][job]["steps"]


@pytest.mark.parametrize("job", sorted(IMAGE_JOBS))
def test_each_image_job_publishes_signs_and_mirrors_its_flavor(job):
    publish = [step for step in steps(job) if step.get("run", "").startswith(".ci/publish")]
    assert [step["run"] for step in publish] == [f".ci/publish {IMAGE_JOBS[job]}"]
    assert publish[0]["if"] == "github.event_name == 'push'"
    assert set(published.DOCKER_HUB_SECRETS) <= set(publish[0]["env"])
    assert all(publish[0]["env"][name] == f"${{{{ secrets.{name} }}}}" for name in published.DOCKER_HUB_SECRETS)
    installer = [index for index, step in enumerate(steps(job)) if step.get("uses", "").startswith(
        "sigstore/cosign-installer@")]
    assert installer and installer[0] < steps(job).index(publish[0])
    assert WORKFLOW["jobs"][job]["permissions"] == {"contents": "read", "packages": "write", "id-token": "write"}


def test_the_published_flavors_are_those_the_workflow_publishes():
    assert set(published.PUBLISHED_FLAVORS) == set(IMAGE_JOBS.values())


def test_the_publish_script_pushes_to_the_documented_registry_and_signs_by_digest():
    host, owner = published.GHCR_NAMESPACE.split("/")
    assert "registry=ghcr.io/${GITHUB_REPOSITORY_OWNER,,}" in PUBLISH_SCRIPT and host == "ghcr.io"
    # The account the images' source label names (org.opencontainers.image.source).
    assert owner == "trainstack" and published.DOCKER_HUB_NAMESPACE == "docker.io/trainstack"
    assert 'cosign sign --yes "$repository@$digest"' in PUBLISH_SCRIPT
    assert 'cosign sign --yes "$mirror@$digest"' in PUBLISH_SCRIPT
    assert "mirror=docker.io/${DOCKERHUB_USERNAME,,}/" in PUBLISH_SCRIPT
    assert all(f"${name}" in PUBLISH_SCRIPT for name in published.DOCKER_HUB_SECRETS)


def test_the_building_page_documents_the_mirror_secrets():
    page = (REPO / "docs" / "contributing" / "building.md").read_text(encoding="utf-8")
    assert all(f"| `{name}` |" in page for name in published.DOCKER_HUB_SECRETS)


@pytest.mark.parametrize("ref, signed", [("refs/heads/main", True), ("refs/tags/v1.2.0", True),
                                         ("refs/heads/feature", False), ("refs/pull/7/merge", False)])
def test_verify_accepts_the_workflow_on_main_and_release_tags_only(ref, signed):
    identity = f"https://github.com/trainstack/trainstack/{published.WORKFLOW_PATH}@{ref}"
    assert bool(re.fullmatch(published.SIGNER_IDENTITY_REGEXP, identity)) is signed
    assert WORKFLOW[True]["push"] == {"branches": ["main"], "tags": ["v*"]}  # YAML reads the key `on` as True


def test_verify_command_names_the_identity_and_githubs_oidc_issuer():
    command = published.verify_command("ghcr.io/trainstack/trainstack:cpu")
    assert command.startswith("cosign verify --certificate-identity-regexp '^https://github")
    assert command.endswith("--certificate-oidc-issuer https://token.actions.githubusercontent.com "
                            "ghcr.io/trainstack/trainstack:cpu")


def test_references_and_content_tags_come_from_the_matrix():
    matrix = load_matrix()
    assert published.published_reference("cpu") == f"ghcr.io/trainstack/{matrix.image_name}:cpu"
    assert published.published_digest_reference("sha256:0") == f"ghcr.io/trainstack/{matrix.image_name}@sha256:0"
    cpu = matrix.flavor("cpu")
    torch = ".".join(cpu.version("torch").split(".")[:2])
    assert published.flavor_content_tag(cpu) == (f"cpu-py{cpu.version('python')}-torch{torch}-tf"
                                                 f"{'.'.join(cpu.version('tensorflow').split('.')[:2])}"
                                                 f"-hvd{cpu.version('horovod')}")
    assert "-cuda" in published.flavor_content_tag(matrix.flavor("gpu"))


def test_the_readme_starts_with_the_pull():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    first_command = next(line for line in readme.splitlines() if line.startswith("$ ") or line.startswith("./"))
    assert first_command == f"$ {published.pull_command(published.published_reference('cpu'))}"
    assert readme.index("## Get the images") < readme.index("## Two commands on a fresh machine")


def test_the_sbom_command_reads_the_registry_artifact_of_the_published_image():
    assert published.sbom_command("ghcr.io/trainstack/trainstack:cpu") == (
        "invoke sbom --image ghcr.io/trainstack/trainstack:cpu --out sbom.cdx.json")
