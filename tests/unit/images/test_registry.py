"""What `invoke push` and `invoke pull` decide before asking a registry: where the credentials come from, which
registries the daemon counts as insecure, how a registry and a tag or digest make a reference."""
import base64
import json
import urllib.request

import pytest

from trainstack.errors import TrainstackError
from trainstack.image.naming import check_tag, image_reference, registry_repository
from trainstack.image.registry import (
    PASSWORD_ENV,
    USER_ENV,
    Credentials,
    RemoteManifest,
    _CredentialsStayHome,
    credentials,
    insecure,
)

DAEMON_DEFAULT = {"InsecureRegistryCIDRs": ["127.0.0.0/8"], "IndexConfigs": {"docker.io": {"Secure": True}}}
DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("host", "config", "expected"), [
    ("127.0.0.1:5000", DAEMON_DEFAULT, True),
    ("localhost:5000", DAEMON_DEFAULT, True),
    ("192.0.2.7:5000", DAEMON_DEFAULT, False),
    ("192.0.2.7:5000", {**DAEMON_DEFAULT, "InsecureRegistryCIDRs": ["192.0.2.0/24"]}, True),
    ("registry.invalid:5000", {"IndexConfigs": {"registry.invalid:5000": {"Secure": False}}}, True),
])
def test_insecure_as_the_daemon_counts_it(host: str, config: dict, expected: bool) -> None:
    assert insecure(host, config) is expected


def test_credentials_from_the_environment_first_then_docker_login(tmp_path, monkeypatch) -> None:
    auth = base64.b64encode(b"alice:from-login").decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {"registry.invalid:5000": {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv(USER_ENV, raising=False)
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    assert credentials("registry.invalid:5000") == Credentials("alice", "from-login", "`docker login registry.invalid:5000`")
    assert credentials("other.invalid") is None
    monkeypatch.setenv(USER_ENV, "bob")
    monkeypatch.setenv(PASSWORD_ENV, "from-env")
    assert credentials("registry.invalid:5000") == Credentials("bob", "from-env", f"${USER_ENV}")
    assert "from-env" not in repr(credentials("registry.invalid:5000"))


def test_half_given_credentials_are_refused(monkeypatch) -> None:
    monkeypatch.delenv(USER_ENV, raising=False)
    monkeypatch.setenv(PASSWORD_ENV, "secret")
    with pytest.raises(TrainstackError) as refused:
        credentials("registry.invalid")
    assert str(refused.value) == (f"${USER_ENV} = '': is empty while ${PASSWORD_ENV} is set (valid: both set, "
                                  "or neither)")


def test_a_manifest_gives_the_image_id_and_the_bytes_a_pull_downloads() -> None:
    manifest = RemoteManifest(DIGEST, {"config": {"digest": "sha256:c0"}, "layers": [{"size": 3}, {"size": 4}]})
    assert (manifest.config_digest, manifest.layer_bytes) == ("sha256:c0", 7)
    assert RemoteManifest(DIGEST, {"manifests": []}).config_digest is None


def test_registry_paths_tags_and_digests_make_references() -> None:
    assert registry_repository("ghcr.io/org", "trainstack") == ("ghcr.io", "org/trainstack")
    assert registry_repository("127.0.0.1:5000", "trainstack") == ("127.0.0.1:5000", "trainstack")
    assert image_reference("trainstack", DIGEST, "127.0.0.1:5000") == f"127.0.0.1:5000/trainstack@{DIGEST}"
    assert check_tag("--tag", DIGEST) == DIGEST
    with pytest.raises(TrainstackError, match=r"^--tag = 'sha256:ab': is not a tag or a digest"):
        check_tag("--tag", "sha256:ab")


@pytest.mark.parametrize(("target", "kept"), [("https://127.0.0.1:5000/v2/t/blobs/x?part=2", True),
                                              ("https://cdn.example/blobs/x?signature=abc", False)])
def test_a_redirect_to_another_host_does_not_carry_the_registrys_credentials(target, kept):
    request = urllib.request.Request("https://127.0.0.1:5000/v2/t/blobs/x", headers={"Authorization": "Basic eDp5"})
    redirected = _CredentialsStayHome().redirect_request(request, None, 307, "Temporary Redirect", {}, target)
    assert redirected.full_url == target
    assert redirected.has_header("Authorization") is kept
