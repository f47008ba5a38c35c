"""`invoke push` and `invoke pull` against a real registry (docker-registry with TLS from a test CA and basic auth)
with tiny images made by `docker import`: the refusals (wrong or missing credentials, a registry that does not
answer, a tag it does not hold, an immutable tag that would move), each one line with nothing pushed, and the pull
by tag and by digest into a daemon holding nothing. The cpu image's own push and pull: tests/image/test_publish.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest
from registries import PASSWORD, TAGS, USER, free_port, registry_api, throwaway_daemon

from trainstack.errors import TrainstackError
from trainstack.image import registry as registry_module
from trainstack.image.matrix import REPO_ROOT
from trainstack.image.publish import pull_image, push_image
from trainstack.image.registry import PASSWORD_ENV, USER_ENV, credentials




def _invoke(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_wrong_or_missing_credentials_push_nothing(client, registry, images, monkeypatch):
    name = "trainstack/credentials"
    image = images("wrong-password")
    monkeypatch.setenv(USER_ENV, USER)
    monkeypatch.setenv(PASSWORD_ENV, "not-the-password")
    with pytest.raises(TrainstackError) as refused:
        push_image(client, image, registry.host, name, TAGS)
    assert str(refused.value) == (
        f"push: the registry {registry.host} refused the credentials of user '{USER}' (from ${USER_ENV}): wrong user "
        f"or password; `docker login {registry.host}` again, or set ${USER_ENV} and ${PASSWORD_ENV}")
    monkeypatch.delenv(USER_ENV)
    monkeypatch.delenv(PASSWORD_ENV)
    monkeypatch.setenv("DOCKER_CONFIG", str(Path(registry.ca).parent / "no-docker-login"))
    with pytest.raises(TrainstackError, match=r"^push: the registry \S+ asks for credentials: `docker login "):
        push_image(client, image, registry.host, name, TAGS)
    monkeypatch.setenv(USER_ENV, USER)
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    assert registry_api(registry).tags(name) == []


def test_half_given_credentials_are_refused(monkeypatch):
    monkeypatch.setenv(USER_ENV, USER)
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    with pytest.raises(TrainstackError, match=r"^\$TRAINSTACK_REGISTRY_PASSWORD = '': is empty while "):
        credentials("127.0.0.1:5000")


def test_a_registry_that_does_not_answer(client, images, login):
    name = "trainstack/down"
    down = f"127.0.0.1:{free_port()}"
    with pytest.raises(TrainstackError, match=rf"^push: the registry {down} does not answer \(https://{down}/v2/"):
        push_image(client, images("down"), down, name, TAGS)
    result = _invoke("pull", "--registry", down)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: pull: the registry {down} does not answer"), result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_an_immutable_tag_never_moves_and_a_repush_changes_nothing(client, registry, images, login):
    name = "trainstack/immutable"
    first, second = images("first"), images("second")
    pushed = push_image(client, first, registry.host, name, TAGS)
    assert pushed.references == [f"{registry.host}/{name}:{tag}" for tag in TAGS]
    assert push_image(client, first, registry.host, name, TAGS) == pushed
    with pytest.raises(TrainstackError) as refused:
        push_image(client, second, registry.host, name, TAGS)
    message = str(refused.value)
    assert message.startswith(f"push: {registry.host}/{name}:{TAGS[0]} already names another image in the registry "
                              f"(manifest {pushed.digest_reference.rpartition('@')[2]}, image {first.id}), not this "
                              f"one ({second.id}), and an immutable tag never moves; nothing was pushed: ")
    assert "\n" not in message
    remote = registry_api(registry)
    assert {tag: remote.manifest(name, tag).config_digest for tag in TAGS} == dict.fromkeys(TAGS, first.id)
    # A new build's immutable tag moves the floating ones.
    moved = push_image(client, second, registry.host, name, ["cpu-py3.11-torch2.13-tf2.21-hvd0.28.1-2026.11.27-abcdef0",
                                                            *TAGS[1:]])
    assert remote.manifest(name, "cpu").config_digest == second.id
    assert remote.manifest(name, TAGS[0]).config_digest == first.id
    assert moved.digest_reference != pushed.digest_reference


def test_pull_names_the_tags_the_registry_holds(client, registry, images, login):
    name = "trainstack"
    push_image(client, images("listed"), registry.host, name, TAGS)
    result = _invoke("pull", "--registry", registry.host, "--tag", "cpu-py3.11-2026.01.01-0000000",
                     **{USER_ENV: USER, PASSWORD_ENV: PASSWORD})
    assert result.returncode == 2
    assert result.stderr == (f"error: pull: --tag = 'cpu-py3.11-2026.01.01-0000000': is not in {registry.host}/{name} "
                             f"(valid: {', '.join(sorted(registry_api(registry).tags(name)))})\n")


def test_the_registry_is_verified_against_its_ca(registry, login, tmp_path, monkeypatch):
    assert registry_api(registry).tags("nothing-here") == []
    monkeypatch.setattr(registry_module, "CERTS_DIR", tmp_path)
    with pytest.raises(TrainstackError, match=rf"^the registry {registry.host}'s certificate is not trusted "):
        registry_api(registry).tags("nothing-here")


def test_pull_by_tag_and_by_digest_into_a_daemon_holding_nothing(client, registry, images, login, tmp_path):
    name = "trainstack/pulled"
    image = images("pulled")
    pushed = push_image(client, image, registry.host, name, TAGS)
    digest = pushed.digest_reference.rpartition("@")[2]
    with throwaway_daemon(tmp_path / "daemon") as second:
        assert second.images.list() == []
        by_tag = pull_image(second, registry.host, name, TAGS[0])
        by_digest = pull_image(second, registry.host, name, digest)
        assert by_tag.image_id == by_digest.image_id == image.id
        assert by_tag.digest_reference == by_digest.digest_reference == pushed.digest_reference
        assert by_tag.layer_bytes > 0
