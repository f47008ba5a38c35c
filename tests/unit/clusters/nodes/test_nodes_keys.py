"""A cluster's keys on this machine: made by ssh-keygen in a private folder, the private key readable by the
image's user in a launcher, the workers' host keys and the hostfile written for launchers, deleted by down."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from trainrun.image_contract import IMAGE_USER_UID
from trainstack.clusters.nodes import keys as cluster_keys

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen (openssh-client)")


@pytest.fixture
def folder():
    made = cluster_keys.make_keys("ci")
    yield made
    cluster_keys.remove_keys(made)


def test_keys_are_made_in_a_private_folder(folder: Path) -> None:
    assert folder.name.startswith("trainstack-nodes-ci-") and stat.S_IMODE(folder.stat().st_mode) == 0o700
    public = (folder / "id_ed25519.pub").read_text()
    assert public.startswith("ssh-ed25519 ") and public.rstrip().endswith(" trainstack-nodes-ci")
    assert (folder / "authorized_keys").read_text() == public
    assert (folder / "id_ed25519").read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    for name in ("authorized_keys", "known_hosts", "hostfile"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o644


def test_the_private_key_is_readable_by_the_images_user_and_nobody_else_of_the_host(folder: Path) -> None:
    private = (folder / "id_ed25519").stat()
    if os.geteuid() == 0:
        assert private.st_uid == IMAGE_USER_UID and stat.S_IMODE(private.st_mode) == 0o600
    elif os.getuid() == IMAGE_USER_UID:
        assert stat.S_IMODE(private.st_mode) == 0o600
    else:
        assert stat.S_IMODE(private.st_mode) == 0o644  # the 0700 folder keeps the host's other users out


def test_every_pair_is_new(folder: Path) -> None:
    other = cluster_keys.make_keys("ci")
    try:
        assert (other / "id_ed25519.pub").read_text() != (folder / "id_ed25519.pub").read_text()
    finally:
        cluster_keys.remove_keys(other)


def test_known_hosts_and_hostfile_for_launchers(folder: Path) -> None:
    cluster_keys.write_known_hosts(folder, {
        "n-worker-1": (["n-worker-1", "172.18.0.2"], "ssh-ed25519 AAAAone"),
        "n-worker-2": (["n-worker-2"], "ssh-ed25519 AAAAtwo"),
    }, 2222)
    assert (folder / "known_hosts").read_text() == ("[n-worker-1]:2222,[172.18.0.2]:2222 ssh-ed25519 AAAAone\n"
                                                    "[n-worker-2]:2222 ssh-ed25519 AAAAtwo\n")
    cluster_keys.write_hostfile(folder, ["n-worker-1", "n-worker-2"], 2)
    assert (folder / "hostfile").read_text() == "n-worker-1 slots=2\nn-worker-2 slots=2\n"


def test_only_a_keys_folder_is_ever_removed(tmp_path: Path, folder: Path) -> None:
    other = tmp_path / "trainstack-nodes-looks-like-it"
    other.mkdir()
    cluster_keys.remove_keys(other)
    cluster_keys.remove_keys(Path("relative/trainstack-nodes-x"))
    assert other.is_dir()
    cluster_keys.remove_keys(folder)
    assert not folder.exists()


def test_without_ssh_keygen_it_says_what_to_install(monkeypatch) -> None:
    monkeypatch.setattr(cluster_keys.shutil, "which", lambda name: None)
    with pytest.raises(cluster_keys.ClusterError, match="apt-get install openssh-client"):
        cluster_keys.make_keys("ci")
