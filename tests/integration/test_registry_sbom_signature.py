"""What stands beside a pushed image in a real registry (docker-registry with TLS from a test CA and basic auth; tiny
images made by `docker import`): its SBOM as an artifact referring to it, read back by `invoke sbom --image
REGISTRY/NAME:TAG` with no image pulled; and its signature in cosign's format with a cosign key (made by tests/support/signing_keys.py), checked
by `invoke verify` with the public key and no image pulled, refused for another key and for an unsigned image, in
one line each."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import docker
import docker.errors
import pytest
from registries import PASSWORD, TAGS, USER, registry_api
from signing_keys import write_key_pair

from trainstack.image.artifacts import SBOM_ARTIFACT_TYPE, referrers, referrers_tag
from trainstack.image.matrix import REPO_ROOT
from trainstack.image.publish import push_image
from trainstack.image.registry import PASSWORD_ENV, USER_ENV
from trainstack.image.signing import PASSPHRASE_ENV, load_signing_key, signature_tag

SBOM = {"bomFormat": "CycloneDX", "specVersion": "1.5", "version": 1,
        "components": [{"type": "library", "name": "torch", "version": "2.13.0+cpu", "purl": "pkg:pypi/torch@2.13.0"}]}
PASSPHRASE = "test-passphrase"



def _invoke(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, USER_ENV: USER, PASSWORD_ENV: PASSWORD, **(env or {})})


def test_the_sbom_is_pushed_beside_the_image_and_read_without_pulling_it(client, registry, images, login):
    name = "trainstack/sbom"
    image = images("sbom")
    sbom = json.dumps(SBOM).encode()
    pushed = push_image(client, image, registry.host, name, TAGS, sbom)
    digest = pushed.digest_reference.rpartition("@")[2]
    remote = registry_api(registry)
    # distribution 2.8 has no referrers API: the referrers tag lists the artifact.
    assert referrers_tag(digest) in remote.tags(name)
    [entry] = referrers(remote, name, digest, SBOM_ARTIFACT_TYPE)
    assert pushed.sbom_reference == f"{registry.host}/{name}@{entry['digest']}"
    # Pushing again changes nothing: the same artifact, listed once.
    assert push_image(client, image, registry.host, name, TAGS, sbom) == pushed
    assert len(referrers(remote, name, digest, SBOM_ARTIFACT_TYPE)) == 1

    reference = f"{registry.host}/{name}:{TAGS[0]}"
    for tag in TAGS:
        client.images.remove(f"{registry.host}/{name}:{tag}", noprune=True)
    result = _invoke("sbom", "--image", reference)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == SBOM
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(reference)


def test_no_sbom_anywhere_is_one_line(client, registry, images, login):
    name = "trainstack/no-sbom"
    push_image(client, images("no-sbom"), registry.host, name, TAGS)
    for tag in TAGS:
        client.images.remove(f"{registry.host}/{name}:{tag}", noprune=True)
    for reference in (f"{registry.host}/{name}:cpu", f"{registry.host}/{name}:not-pushed"):
        result = _invoke("sbom", "--image", reference)
        assert result.returncode == 2
        assert result.stderr == (f"error: --image = '{reference}': is not an image here and {registry.host} holds no "
                                 "SBOM of it (valid: an image here (`docker images`), or REGISTRY/NAME:TAG of an image "
                                 "`invoke push` pushed with its SBOM)\n")
    result = _invoke("sbom", "--image", "trainstack-not-here:cpu")
    assert result.returncode == 2
    assert result.stderr.startswith("error: --image = 'trainstack-not-here:cpu': is not an image here and names no "
                                    "registry (valid: "), result.stderr


def test_a_signed_image_verifies_with_its_key_only(client, registry, images, login, tmp_path):
    name = "trainstack/signed"
    key_file, public = write_key_pair(tmp_path, PASSPHRASE)
    _, other = write_key_pair(tmp_path, "other", name="other")
    key = load_signing_key("--sign-key", str(key_file), PASSPHRASE)
    image = images("signed")
    pushed = push_image(client, image, registry.host, name, TAGS, sign_key=key)
    assert pushed.signed
    digest = pushed.digest_reference.rpartition("@")[2]
    remote = registry_api(registry)
    assert signature_tag(digest) == f"sha256-{digest[7:]}.sig" and signature_tag(digest) in remote.tags(name)
    # Pushing again adds no second signature of the same key.
    push_image(client, image, registry.host, name, TAGS, sign_key=key)
    [layer] = json.loads(remote.manifest_bytes(name, signature_tag(digest), "application/vnd.oci.image.manifest.v1+json")[1])["layers"]
    assert json.loads(remote.blob(name, layer["digest"]))["critical"]["identity"] == {
        "docker-reference": f"{registry.host}/{name}"}

    for tag in TAGS:
        client.images.remove(f"{registry.host}/{name}:{tag}", noprune=True)
    for reference in (f"{registry.host}/{name}:{TAGS[0]}", f"{registry.host}/{name}:cpu"):
        result = _invoke("verify", "--image", reference, "--key", str(public))
        assert (result.returncode, result.stdout) == (0, f"{digest}\n"), result.stderr
    result = _invoke("verify", "--image", f"{registry.host}/{name}:cpu", "--key", str(other))
    assert result.returncode == 2
    assert result.stderr == (f"error: verify: none of the 1 signatures of {registry.host}/{name}:cpu ({digest}) is made "
                             f"by the key {other}\n")
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(f"{registry.host}/{name}:cpu")


def test_an_unsigned_image_fails_verification_in_one_line(client, registry, images, login, tmp_path):
    name = "trainstack/unsigned"
    _, public = write_key_pair(tmp_path, PASSPHRASE)
    pushed = push_image(client, images("unsigned"), registry.host, name, TAGS)
    digest = pushed.digest_reference.rpartition("@")[2]
    result = _invoke("verify", "--image", f"{registry.host}/{name}:cpu", "--key", str(public))
    assert result.returncode == 2
    assert result.stderr == (f"error: verify: {registry.host}/{name}:cpu ({digest}) is not signed: {registry.host}/"
                             f"{name} has no {signature_tag(digest)}\n")


def test_a_wrong_passphrase_or_key_file_is_refused_before_anything_is_pushed(client, registry, images, tmp_path):
    key_file, public = write_key_pair(tmp_path, PASSPHRASE)
    result = _invoke("push", "--registry", registry.host, "--sign-key", str(key_file),
                     env={PASSPHRASE_ENV: "not-the-passphrase"})
    assert result.returncode == 2
    assert result.stderr == (f"error: ${PASSPHRASE_ENV} = '(hidden)': does not open {key_file} (valid: that key's "
                             "passphrase)\n")
    result = _invoke("push", "--registry", registry.host, "--sign-key", str(public), env={PASSPHRASE_ENV: PASSPHRASE})
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: --sign-key = '{public}': is not a cosign private key file (valid: ")
