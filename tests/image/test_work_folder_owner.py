"""The documented `-v "$PWD":/home/trainer/work` on any host folder (images/scripts/work_folder.py, run by the
image's entrypoint): started as root (`--user root`, as the pages' commands are), the image's user takes the folder
owner's uid, or keeps uid 1000 on a folder of root's, which it gets an ACL entry for; the lab and an MLflow run write
there, and the files on the host belong to that uid; no process but tini (PID 1) runs as root. A folder the user
cannot write fails at once, in one line naming it, its owner and the fix, where MLflow's SQLite store retried for
112 s and JupyterLab answered 403 on every save."""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest
import requests

from trainrun.image_contract import EXAMPLES_DIR, MLFLOW_STORE, NOTEBOOK_DIR
from trainstack.clusters.lab import lab_url

# (folder under the test's base, its owner, its mode, the uid the image's user runs as on it)
FOLDERS = {"root": (0, 0o755, 1000), "uid-2000": (2000, 0o755, 2000), "root-refused": (0, 0o755, None),
           "uid-2000-read-only": (2000, 0o555, None)}
LOG_A_RUN = """
import mlflow
with mlflow.start_run() as run:
    mlflow.log_param("lr", 0.1)
    mlflow.log_text("checkpoint", "checkpoints/model.txt")
print("artifact_uri", run.info.artifact_uri)
"""
SECOND = 1_000_000_000
QUICK_HEALTH = {"interval": SECOND, "start_period": 60 * SECOND}
QUICK = 30  # seconds, docker's start and stop included: what MLflow alone retried for 112 s


def in_base(docker_client, image, base: Path, script: str) -> None:
    """Runs `script` as root in the image, the base folder mounted at /base: whoever runs the tests, the folders
    get their owners."""
    docker_client.containers.run(image.id, ["sh", "-c", script], user="root", working_dir="/base", remove=True,
                                 volumes={str(base): {"bind": "/base", "mode": "rw"}})


@pytest.fixture(scope="module")
def base(docker_client, image):
    path = Path(tempfile.mkdtemp(prefix="trainstack-work-owner-", dir="/tmp"))
    path.chmod(0o755)
    in_base(docker_client, image, path, " && ".join(
        f"mkdir {name} && chown {owner}:{owner} {name} && chmod {mode:o} {name}"
        for name, (owner, mode, _) in FOLDERS.items()))
    yield path
    in_base(docker_client, image, path, "rm -rf /base/*")
    shutil.rmtree(path)


def healthy(container, timeout: float = 60) -> bool:
    """The image's HEALTHCHECK, which docker runs as root here, finds the server the image's user runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        container.reload()
        if container.attrs["State"]["Health"]["Status"] == "healthy":
            return True
        time.sleep(1)
    return False


def mounted(base: Path, name: str) -> dict:
    return {str(base / name): {"bind": NOTEBOOK_DIR, "mode": "rw"}}


def owner(path: Path) -> int:
    return path.stat().st_uid


@pytest.mark.parametrize("name", ["root", "uid-2000"])
def test_the_lab_saves_into_the_folder_as_its_owner(start_lab, base, name):
    folder_owner, _, uid = FOLDERS[name]
    container = start_lab(user="root", volumes=mounted(base, name), healthcheck=QUICK_HEALTH)
    url = lab_url(container, timeout=180)
    root, token = url.split("/lab?")[0], url.split("token=")[1]
    session = requests.Session()
    session.headers["Authorization"] = f"token {token}"
    notebook = {"type": "notebook", "content": {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}}
    saved = session.put(f"{root}/api/contents/work/saved.ipynb", json=notebook)
    assert saved.status_code == 201, saved.text
    assert (owner(base / name / "saved.ipynb"), owner(base / name)) == (uid, folder_owner)
    processes = [line.split(None, 3) for line in
                 container.exec_run(["ps", "-eo", "pid=,uid=,stat=,args="], user="root").output.decode().splitlines()]
    # Not counted: PID 1, tini, which only reaps and forwards signals; what docker execs as root (this ps, the
    # HEALTHCHECK), and an exited one tini has not reaped yet (a zombie, `[python3] <defunct>`: seen once in CI).
    users = {process_uid for pid, process_uid, state, args in processes
             if pid != "1" and not state.startswith("Z") and not args.startswith("ps ")
             and "trainstack-healthcheck" not in args}
    assert users == {str(uid)}, processes
    assert processes[0][:2] == ["1", "0"] and processes[0][3].startswith("tini "), processes
    assert healthy(container), container.attrs["State"]["Health"]


@pytest.mark.parametrize("name", ["root", "uid-2000"])
def test_an_mlflow_run_writes_its_store_and_artifacts_into_the_folder_as_its_owner(in_image, base, name):
    _, _, uid = FOLDERS[name]
    output = in_image.run(["python", "-c", LOG_A_RUN], user="root", volumes=mounted(base, name),
                          env={"MLFLOW_TRACKING_URI": MLFLOW_STORE})
    artifact_uri = output.split("artifact_uri ")[1].split()[0]
    assert artifact_uri.removeprefix("file://").startswith(f"{NOTEBOOK_DIR}/mlartifacts/"), output
    (artifact,) = (base / name / "mlartifacts").rglob("model.txt")
    assert artifact.read_text() == "checkpoint"
    assert (owner(base / name / "mlflow.db"), owner(artifact)) == (uid, uid)


def refused(in_image, command: list[str], **options) -> tuple[str, float]:
    start = time.monotonic()
    status, output = in_image.run_status(command, timeout=120, **options)
    took = time.monotonic() - start
    assert status == 2, output[-3000:]
    return output, took


def test_a_folder_its_owner_cannot_write_fails_at_once_in_one_line(in_image, base):
    """The MLflow workflow that retried SQLite for 112 s: one line before anything starts."""
    output, took = refused(in_image, ["python", f"{EXAMPLES_DIR}/torch_distributor_mnist.py", "--tracking-uri",
                                      MLFLOW_STORE], user="root", volumes=mounted(base, "uid-2000-read-only"))
    assert output == (f"error: work folder = '{NOTEBOOK_DIR}': the mounted folder belongs to uid 2000 (gid 2000, "
                      "mode 555) and trainer (uid 2000) cannot write to it (valid: chmod u+w FOLDER on the host)\n")
    assert took < QUICK, took


@pytest.mark.parametrize("command", [["lab"], ["python", f"{EXAMPLES_DIR}/torch_distributor_mnist.py",
                                                "--tracking-uri", MLFLOW_STORE]], ids=["lab", "mlflow"])
def test_without_user_root_a_folder_of_roots_fails_at_once_naming_the_fix(in_image, base, command):
    output, took = refused(in_image, command, volumes=mounted(base, "root-refused"))
    assert output == (f"error: work folder = '{NOTEBOOK_DIR}': the mounted folder belongs to uid 0 (root, gid 0, "
                      "mode 755) and trainer (uid 1000) cannot write to it (valid: docker run --user root ... (the "
                      "entrypoint then runs as the folder's owner, or NB_UID/NB_GID); or chown 1000 FOLDER on the "
                      "host)\n")
    assert took < QUICK, took


def test_nb_uid_is_taken_and_uid_0_refused(in_image, base):
    assert in_image.run(["id", "-u"], user="root", env={"NB_UID": "3000", "NB_GID": "3000"}).strip() == "3000"
    output, _ = refused(in_image, ["id", "-u"], user="root", env={"NB_UID": "0"})
    assert output.startswith("error: NB_UID = '0': no process of the image's user runs as root")


def test_user_root_alone_stays_root(in_image):
    """`docker run --user root IMAGE ...` without a mounted folder or NB_UID: root, as asked (apt-get, debugging)."""
    assert in_image.run(["id", "-u"], user="root").strip() == "0"
