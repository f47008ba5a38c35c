"""Where users get the images CI publishes (.github/workflows/images.yml): the registry it pushes every tag to, the
Docker Hub repository it mirrors them to, and the keyless cosign signature of each pushed image (the identity of the
workflow's run, certified through GitHub's OIDC issuer). The commands of the README's and the quickstart's first
section are made here; tests/unit/docs/test_published_images.py holds them to the workflow.

The publishing account is the one the images' source label names (naming.PROJECT_URL, github.com/OWNER/trainstack):
the workflow pushes to ghcr.io/${{ github.repository_owner }} (naming.GHCR_NAMESPACE), and the Docker Hub mirror uses
the same name.
"""
from __future__ import annotations

import shlex
from typing import Any

from trainrun.image_contract import SBOM_PATH
from trainstack.image.matrix import Flavor, load_matrix
from trainstack.image.naming import GHCR_NAMESPACE, OWNER, REPOSITORY, content_tag, image_reference

WORKFLOW_PATH = ".github/workflows/images.yml"
# The mirror's account is the DOCKERHUB_USERNAME secret's (.ci/publish), the publisher's on Docker Hub.
DOCKER_HUB_NAMESPACE = f"docker.io/{OWNER}"
# The repository secrets the workflow's Docker Hub mirror logs in with (an access token, not the password).
DOCKER_HUB_SECRETS = ("DOCKERHUB_USERNAME", "DOCKERHUB_TOKEN")
OIDC_ISSUER = "https://token.actions.githubusercontent.com"
# The certificate of a keyless signature names the workflow file and the ref it ran on: main or a v* tag.
SIGNER_IDENTITY_REGEXP = (rf"^https://github\.com/{OWNER}/{REPOSITORY}/\.github/workflows/images\.yml"
                          r"@refs/(heads/main|tags/v.+)$")
DEFAULT_FLAVOR = "cpu"
# The flavors the workflow publishes (its image jobs run `.ci/publish FLAVOR`); the others are built from a checkout.
PUBLISHED_FLAVORS = ("cpu", "gpu")


def published_reference(tag: str, namespace: str = GHCR_NAMESPACE) -> str:
    """NAMESPACE/IMAGE:TAG of a published image, e.g. ghcr.io/OWNER/trainstack:cpu."""
    return image_reference(load_matrix().image_name, tag, namespace)


def published_digest_reference(digest: str, namespace: str = GHCR_NAMESPACE) -> str:
    """NAMESPACE/IMAGE@DIGEST: the image by its manifest digest, which no push can move."""
    return f"{namespace}/{load_matrix().image_name}@{digest}"


def flavor_content_tag(flavor: Flavor) -> str:
    """The content tag an image of the flavor gets when it holds the matrix's versions (the tag of a built image
    is read from its manifest: trainstack.image.naming.content_tag)."""
    versions: dict[str, Any] = {"flavor": flavor.name, "python": flavor.version("python"),
                                "packages": {name: flavor.version(name) for name in ("torch", "tensorflow", "horovod")
                                             if flavor.version(name)},
                                "libraries": {"cuda": flavor.version("cuda")} if flavor.version("cuda") else {}}
    return content_tag(versions)


def pull_command(reference: str) -> str:
    return shlex.join(["docker", "pull", reference])


def verify_command(reference: str) -> str:
    """cosign's check of the keyless signature: made by images.yml on main or a v* tag, certified by GitHub's
    OIDC issuer."""
    return shlex.join(["cosign", "verify", "--certificate-identity-regexp", SIGNER_IDENTITY_REGEXP,
                       "--certificate-oidc-issuer", OIDC_ISSUER, reference])


def sbom_command(reference: str) -> str:
    """`invoke sbom` from a checkout: the SBOM artifact `invoke push` put beside the image, read without pulling it."""
    return shlex.join(["invoke", "sbom", "--image", reference, "--out", "sbom.cdx.json"])


def check_commands(reference: str) -> list[str]:
    """Reading what an image holds: trainrun's report of the image and the machine (with the /dev/shm the training
    commands give, which doctor checks), and the image's SBOM."""
    return [shlex.join(["docker", "run", "--rm", "--shm-size", "1g", reference, "trainrun", "doctor"]),
            shlex.join(["docker", "run", "--rm", reference, "cat", SBOM_PATH]) + " > sbom.cdx.json"]


def digest_command(reference: str) -> str:
    """The registry digests of a pulled image, one a line: none, rather than a template error, for an image built or
    loaded here, which has none (`{{index .RepoDigests 0}}` panics on it)."""
    return shlex.join(["docker", "inspect", "--format", "{{range .RepoDigests}}{{println .}}{{end}}", reference])


def local_id_command(reference: str) -> str:
    """The ID of an image built or loaded here, which pins it on this machine (`docker run ID`)."""
    return shlex.join(["docker", "image", "inspect", "--format", "{{.Id}}", reference])


def readme_commands() -> str:
    """The README's first commands: pull the default flavor, check it, train with two Horovod ranks in it."""
    from trainstack.image.workflows import WORKFLOWS

    reference = published_reference(DEFAULT_FLAVOR)
    job = next(workflow for workflow in WORKFLOWS if workflow.name == "horovod-torch-trainrun")
    lines = [pull_command(reference), *check_commands(reference),
             f"docker run --rm --shm-size 1g {reference} \\\n    {shlex.join(job.command)}"]
    return "```console\n" + "\n".join(f"$ {line}" for line in lines) + "\n```"
