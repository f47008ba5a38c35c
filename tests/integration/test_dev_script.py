"""./dev setup on a machine whose docker engine already answers: it must not ask apt for docker, and it
leaves an env file that gives another shell the same invoke and build options."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def docker_answers() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True, timeout=60).returncode == 0


@pytest.mark.timeout(600)
@pytest.mark.skipif(not docker_answers(), reason="needs a docker engine that answers")
def test_dev_setup_leaves_a_working_docker_alone(tmp_path: Path) -> None:
    fakes = tmp_path / "bin"
    fakes.mkdir()
    calls = tmp_path / "apt-calls"
    (fakes / "apt-get").write_text(f'#!/bin/sh\necho "apt-get $*" >> {calls}\n')
    # Every system package but docker reads as installed, so any apt call would be for docker.
    (fakes / "dpkg-query").write_text("#!/bin/sh\nprintf 'install ok installed'\n")
    for fake in fakes.iterdir():
        fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}"}
    result = subprocess.run(["bash", "dev", "setup"], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=540)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert not calls.exists(), calls.read_text()
    env_file = (REPO / ".trainstack.env").read_text()
    assert f"{REPO}/.venv/bin" in env_file and "export TRAINSTACK_BASE_IMAGE=" in env_file
    assert "source .trainstack.env" in result.stdout
    shell = subprocess.run(["bash", "-c", "source .trainstack.env && command -v invoke && invoke --list"],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert shell.returncode == 0 and f"{REPO}/.venv/bin/invoke" in shell.stdout and "pool.up" in shell.stdout
