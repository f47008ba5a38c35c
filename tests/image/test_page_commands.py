"""Every command the quickstarts and guides show for the image, run as a reader pastes it into bash after `docker
pull`: in a scratch folder of their own, with the image under test tagged with the name the pull gives it
(ghcr.io/trainstack/trainstack:cpu), and nothing else prepared. A command that cannot run here says why, once, in
NOT_RUN_HERE; servers (JupyterLab, MLflow) must answer on the port the command publishes, then are stopped."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker.errors
import pytest
import requests

from trainstack.docsite.shown import MARKER, page_commands
from trainstack.image.published_images import published_reference

pytestmark = pytest.mark.timeout(1200)

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = published_reference("cpu")
PAGES = [*sorted((REPO / "docs" / "quickstarts").glob("*.md")), *sorted((REPO / "docs" / "guides").glob("*.md"))]
# (what a command starts with or holds, why the walk does not run it here, and what runs it instead)
NOT_RUN_HERE = (
    ("docker pull ", "no registry is reachable from this machine; `invoke test --long` pushes the image to a TLS + auth "
                     "registry and pulls it back by tag and by digest (tests/image/test_publish.py)"),
    ("cosign verify", "the signatures are on ghcr.io, which this machine cannot reach; "
                      "tests/integration/test_registry_sbom_signature.py verifies them as cosign does"),
    (" -it ", "an interactive shell"),
    ("srun ", "a Slurm job's line, run inside an allocation: the integration tier runs the Slurm quickstart's host "
              "lines and a rendered pool on its Slurm cluster (tests/integration/test_slurm.py), `invoke test --long` "
              "its Podman and Charliecloud lines (tests/image/test_slurm_pages.py)"),
    ("sbatch ", "a batch job's submission, which needs a Slurm cluster: the integration tier submits the Slurm "
                "quickstart's host lines and its pool template to its Slurm cluster (tests/integration/test_slurm.py), "
                "`invoke test --long` its Podman lines (tests/image/test_slurm_pages.py)"),
    ("--network NET", "a template of the reader's own: their network and key (the multi-node guide says so); "
                      "`invoke nodes.up` runs it (tests/integration/test_nodes.py)"),
    ('"$PWD/models"', "needs the reader's downloaded model; tests/image/test_hub_models.py mounts one"),
)
SERVER_PORTS = {" lab": 8888, "mlflow server": 5000}


def without_batch_scripts(text: str) -> str:
    """The page without the batch scripts it shows (`slurm-script` blocks): their lines run in a Slurm job, as the
    Slurm tests submit them (tests/integration/test_slurm.py, tests/image/test_slurm_pages.py)."""
    kept, position = [], 0
    for match in MARKER.finditer(text):
        if match["kind"] == "slurm-script" and match.start() >= position:
            kept.append(text[position:match.start()])
            end = f"<!-- {match['marker']}:end -->"
            position = text.index(end, match.end()) + len(end)
    return "".join(kept) + text[position:]


def image_commands() -> dict[str, str]:
    """{command: the first page that shows it} of the commands that run the image or read it."""
    found: dict[str, str] = {}
    for page in PAGES:
        for command in page_commands(without_batch_scripts(page.read_text(encoding="utf-8"))):
            if "trainstack/trainstack" in command or "trainstack:cpu" in command:
                found.setdefault(command, page.relative_to(REPO).as_posix())
    return found


COMMANDS = image_commands()


def not_run_here(command: str) -> str | None:
    return next((why for marker, why in NOT_RUN_HERE if marker in command), None)


def served_port(command: str) -> int | None:
    return next((port for marker, port in SERVER_PORTS.items() if command.rstrip().endswith(marker.strip())
                 or f"{marker} " in command), None)


def marks(command: str) -> list:
    """Trainings and servers take a minute or more each: `invoke test --long`; the quick reads run in CI."""
    return [pytest.mark.long] if "/opt/trainstack/examples/" in command or served_port(command) else []


@pytest.fixture(scope="module")
def pulled(docker_client, image):
    """The image under test by the name `docker pull` gives it; the tag removed afterwards if the walk made it."""
    try:
        had = docker_client.images.get(PUBLISHED).id
    except docker.errors.ImageNotFound:
        had = None
    image.tag(PUBLISHED)
    yield PUBLISHED
    if had is None:
        docker_client.images.remove(PUBLISHED, noprune=True)
    elif had != image.id:
        docker_client.images.get(had).tag(PUBLISHED)


def pasted(command: str, folder: Path) -> subprocess.Popen:
    # The host's tooling (invoke) on PATH, as in the reader's activated venv.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.Popen(["bash", "-c", command], cwd=folder, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def serve_then_stop(docker_client, command: str, folder: Path, port: int) -> str:
    """Starts the server as pasted; returns what it printed once http://127.0.0.1:PORT answers, having removed its
    container."""
    process = pasted(command, folder)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if requests.get(f"http://127.0.0.1:{port}/", timeout=5).status_code < 500:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(1)
        assert process.poll() is None, f"exited {process.returncode}:\n{process.stdout.read()[-3000:]}"
        assert requests.get(f"http://127.0.0.1:{port}/", timeout=5).status_code < 500
    finally:
        for container in docker_client.containers.list():  # the one bound to the port: no other test's
            bound = [binding["HostPort"] for bindings in container.ports.values() for binding in bindings or []]
            if str(port) in bound:
                container.remove(force=True)
        out, _ = process.communicate(timeout=60)
    return out


@pytest.mark.parametrize("command", [
    pytest.param(command, id=f"{page}:{index}", marks=marks(command))
    for index, (command, page) in enumerate(COMMANDS.items())])
def test_a_shown_command_runs_as_pasted_after_a_pull(docker_client, pulled, tmp_path, command):
    why = not_run_here(command)
    if why:
        pytest.skip(why)
    if command.startswith("invoke "):  # the host's tooling, which the reader runs in their clone
        (REPO / "build").mkdir(exist_ok=True)
        tmp_path = Path(tempfile.mkdtemp(prefix="page-commands-", dir=REPO / "build"))
    port = served_port(command)
    if port:
        print(serve_then_stop(docker_client, command, tmp_path, port)[-2000:])
        return
    process = pasted(command, tmp_path)
    out, _ = process.communicate(timeout=1100)
    if tmp_path.is_relative_to(REPO):
        shutil.rmtree(tmp_path)
    assert process.returncode == 0, f"`{command}` exited {process.returncode}:\n{out[-4000:]}"


def test_the_walk_finds_the_pages_commands():
    """Each kind the pages show is in the walk: trainings, the lab, MLflow's server, the pull page's steps."""
    assert len(COMMANDS) > 40
    assert {bool(marks(command)) for command in COMMANDS} == {True, False}
    assert any(command.startswith("docker run --rm --shm-size 1g " + PUBLISHED + " trainrun doctor")
               for command in COMMANDS)
    assert {served_port(command) for command in COMMANDS} >= {8888, 5000}
