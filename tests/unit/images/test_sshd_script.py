"""images/scripts/trainstack-sshd, run on this host with a stand-in for sshd (the image runs the real one; set
TRAINSTACK_TEST_SSHD to an sshd binary to have it test the config with `sshd -t` too). It refuses root, so
as root the script runs as `nobody` through setpriv."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from trainrun import image_contract
from trainstack.image.matrix import REPO_ROOT

SCRIPT = REPO_ROOT / "images" / "scripts" / image_contract.SSHD_COMMAND
NOBODY = 65534
AS_ROOT = os.geteuid() == 0
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOb0Fh7JtV8Xj1dDCfz8rr0bYBSHpLSDGGTRDnXYUdoA nodes@host"
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHgkJZKmVx0Gf0hQJcVJ2AjCK4Xo0d3Z1T7zX0v3XmZ4 operator"

pytestmark = [
    pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen (openssh-client)"),
    pytest.mark.skipif(AS_ROOT and shutil.which("setpriv") is None, reason="as root, needs setpriv (util-linux)"),
]


class Sandbox:
    """A home, a mounted-keys folder and a stand-in sshd that records its arguments, readable by the user
    the script runs as."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="trainstack-sshd-test-"))
        self.root.chmod(0o755)
        self.home = self.root / "home"
        self.keys = self.root / "keys"
        self.home.mkdir()
        self.keys.mkdir(mode=0o755)
        self.script = self.root / "trainstack-sshd"
        shutil.copyfile(SCRIPT, self.script)
        self.script.chmod(0o755)
        self.args = self.root / "sshd-args"
        self.sshd = self.root / "sshd"
        self.sshd.write_text(f'#!/bin/sh\necho "$@" > {self.args}\n')
        self.sshd.chmod(0o755)
        self.args.touch()
        self.args.chmod(0o666)

    def run(self, *args: str, as_root: bool = False, **env: str) -> subprocess.CompletedProcess:
        if AS_ROOT:
            subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(self.home)], check=True)
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if AS_ROOT and not as_root \
            else []
        environ = {"HOME": str(self.home), "PATH": "/usr/bin:/bin", "TRAINSTACK_SSH_DIR": str(self.keys),
                   "TRAINSTACK_SSHD": os.environ.get("TRAINSTACK_TEST_SSHD", str(self.sshd)),
                   **({"LD_LIBRARY_PATH": os.environ["LD_LIBRARY_PATH"]} if "LD_LIBRARY_PATH" in os.environ else {}),
                   **env}
        return subprocess.run([*prefix, str(self.script), *args], env=environ, capture_output=True, text=True,
                              timeout=60)

    @property
    def state(self) -> Path:
        return self.home / ".trainstack-sshd"

    def config(self) -> list[str]:
        return (self.state / "sshd_config").read_text().splitlines()


@pytest.fixture
def sandbox():
    box = Sandbox()
    yield box
    shutil.rmtree(box.root, ignore_errors=True)


def test_the_config_is_key_only_on_2222_with_the_images_path(sandbox) -> None:
    (sandbox.keys / "authorized_keys").write_text(KEY + "\n")
    done = sandbox.run("--check", PATH="/opt/venv/bin:/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(sandbox.state / "sshd_config")
    config = sandbox.config()
    for line in (f"Port {image_contract.SSHD_PORT}", f"HostKey {sandbox.state}/ssh_host_ed25519_key",
                 f"AuthorizedKeysFile {sandbox.state}/authorized_keys", f"PidFile {sandbox.state}/sshd.pid",
                 "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
                 "HostbasedAuthentication no", "UsePAM no", "PermitRootLogin no", "PermitUserEnvironment no",
                 "DisableForwarding yes", "SetEnv PATH=/opt/venv/bin:/usr/bin:/bin LANG=C.UTF-8 LC_ALL=C.UTF-8"):
        assert line in config
    assert any(line.startswith("AllowUsers ") for line in config)
    assert not any(line.startswith("AcceptEnv") for line in config)


def test_serving_prints_the_host_key_and_runs_sshd_in_the_foreground(sandbox) -> None:
    if "TRAINSTACK_TEST_SSHD" in os.environ:
        pytest.skip("a real sshd would serve")
    (sandbox.keys / "authorized_keys").write_text(KEY + "\n")
    done = sandbox.run()
    assert done.returncode == 0, done.stderr
    public = (sandbox.state / "ssh_host_ed25519_key.pub").read_text().strip()
    assert f"trainstack-sshd: host key {public}" in done.stdout.splitlines()
    assert sandbox.args.read_text().split() == ["-D", "-e", "-f", str(sandbox.state / "sshd_config")]


def test_the_host_key_is_new_at_every_start_and_private(sandbox) -> None:
    (sandbox.keys / "authorized_keys").write_text(KEY + "\n")
    keys = []
    for _ in range(2):
        assert sandbox.run("--check").returncode == 0
        keys.append((sandbox.state / "ssh_host_ed25519_key.pub").read_text())
    assert keys[0] != keys[1] and keys[0].startswith("ssh-ed25519 ")
    assert stat.S_IMODE(sandbox.state.stat().st_mode) == 0o700
    for name in ("ssh_host_ed25519_key", "authorized_keys", "sshd_config"):
        assert stat.S_IMODE((sandbox.state / name).stat().st_mode) == 0o600


def test_keys_from_the_mounted_folder_and_home_are_both_authorized(sandbox) -> None:
    (sandbox.keys / "authorized_keys").write_text(KEY)  # no final newline
    (sandbox.home / ".ssh").mkdir()
    (sandbox.home / ".ssh" / "authorized_keys").write_text(OTHER_KEY + "\n")
    assert sandbox.run("--check").returncode == 0
    authorized = [line for line in (sandbox.state / "authorized_keys").read_text().splitlines() if line]
    assert authorized == [KEY, OTHER_KEY]


def test_without_authorized_keys_it_says_where_to_mount_one(sandbox) -> None:
    (sandbox.keys / "authorized_keys").write_text("# nothing here\n\n")
    done = sandbox.run()
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"trainstack-sshd: no authorized keys: mount a public key at {sandbox.keys}/authorized_keys "
                           f"(or {sandbox.home}/.ssh/authorized_keys); password logins are off\n")
    assert sandbox.args.read_text() == ""


@pytest.mark.parametrize("port,message", [("22", "may open ports 1024 to 65535 only"), ("ssh", "is not a port number")])
def test_a_bad_port_is_refused(sandbox, port: str, message: str) -> None:
    (sandbox.keys / "authorized_keys").write_text(KEY + "\n")
    done = sandbox.run(TRAINSTACK_SSHD_PORT=port)
    assert done.returncode == 2 and message in done.stderr


@pytest.mark.skipif(not AS_ROOT, reason="runs as root only where the tests do")
def test_root_is_refused(sandbox) -> None:
    (sandbox.keys / "authorized_keys").write_text(KEY + "\n")
    done = sandbox.run(as_root=True)
    assert done.returncode == 2 and "not root" in done.stderr
