"""JupyterLab in the image (the entrypoint's `lab` role), as a user reaches it from the host: a token at each
start, nothing without it (no kernel, terminal, file or websocket), the image's user, its work folder on a
volume, the HEALTHCHECK."""
from __future__ import annotations

import asyncio
import re
import time
import uuid

import pytest
import requests
import tornado.httpclient
import tornado.websocket

from lab_kernels import base, execute, token_of, with_token
from trainrun.image_contract import IMAGE_USER_UID, NOTEBOOK_DIR
from trainstack.clusters.lab import host_port, lab_url, logged_token

START_TIMEOUT = 180
# Docker's HEALTHCHECK interval is 15s; the tests inherit the image's check and only check more often.
SECOND = 1_000_000_000
QUICK_HEALTH = {"interval": SECOND, "start_period": 60 * SECOND}


@pytest.fixture(scope="module")
def lab(start_lab):
    container = start_lab()
    return container, lab_url(container, timeout=START_TIMEOUT)


def like_a_browser(url: str) -> requests.Session:
    """A client without the token that passes the XSRF check as a page of the server would, so what refuses
    it is the missing token."""
    session = requests.Session()
    session.get(f"{base(url)}/login").raise_for_status()
    session.headers["X-XSRFToken"] = session.cookies["_xsrf"]
    return session


def websocket_status(url: str, path: str, token: str | None = None) -> int:
    """The HTTP status of a websocket handshake (101 when it opens)."""
    address = base(url).replace("http://", "ws://") + path + (f"?token={token}" if token else "")

    async def connect() -> int:
        try:
            connection = await tornado.websocket.websocket_connect(address, connect_timeout=30)
        except tornado.httpclient.HTTPClientError as err:
            return err.code
        connection.close()
        return 101

    return asyncio.run(connect())


def wait_for_health(container, status: str = "healthy", timeout: float = 120) -> dict:
    """Docker's health record once it reads `status`, or at the timeout (a loaded machine may time a check out,
    so one unhealthy reading is not the verdict)."""
    deadline = time.monotonic() + timeout
    while True:
        container.reload()
        health = container.attrs["State"]["Health"]
        if health["Status"] == status or time.monotonic() > deadline:
            return health
        time.sleep(1)


def test_lab_prints_its_url_with_a_token_that_opens_it(lab):
    container, url = lab
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/lab\?token=[0-9a-f]{48}", url), url
    assert with_token(url).get(f"{base(url)}/api/status").status_code == 200
    wrong = requests.get(f"{base(url)}/api/status", headers={"Authorization": "token not-the-token"})
    assert wrong.status_code == 403


def test_lab_neither_fetches_news_nor_checks_for_updates(lab):
    _, url = lab
    response = with_token(url).get(f"{base(url)}/lab/api/settings/@jupyterlab/apputils-extension:notification")
    assert response.status_code == 200, response.text
    # The server applies the image's overrides to the schema's defaults; the user has set nothing.
    defaults = {name: field.get("default") for name, field in response.json()["schema"]["properties"].items()}
    assert defaults["fetchNews"] == "false" and defaults["checkForUpdates"] is False, defaults


def test_token_is_new_at_each_start(lab, start_lab):
    _, first = lab
    second = lab_url(start_lab(), timeout=START_TIMEOUT)
    assert token_of(first) != token_of(second)


def test_jupyter_token_sets_the_token(start_lab):
    token = uuid.uuid4().hex
    container = start_lab(environment={"JUPYTER_TOKEN": token})
    url = lab_url(container, token=token, timeout=START_TIMEOUT)
    assert logged_token(container.logs().decode()) is None  # the server prints `token=...`, not the user's token
    assert token not in container.logs().decode()
    assert with_token(url).get(f"{base(url)}/api/status").status_code == 200


@pytest.mark.parametrize("environment, expected", [
    ({"JUPYTER_TOKEN": ""}, "error: JUPYTER_TOKEN = '': "),
    ({"JUPYTER_TOKEN": " "}, "error: JUPYTER_TOKEN = ' ': an empty or blank token"),
    ({"JUPYTER_PORT": "abc"}, "error: JUPYTER_PORT = 'abc': is not a port number (valid: a whole number from 1 to "
                              "65535; unset for 8888)"),
    ({"MLFLOW_PORT": "70000"}, "error: MLFLOW_PORT = '70000': is not a port number (valid: a whole number from 1 to "
                               "65535; unset for 5000)"),
])
def test_a_blank_token_or_a_bad_port_is_refused_in_one_line(docker_client, image, environment, expected):
    container = docker_client.containers.run(image.id, ["lab"], detach=True, environment=environment)
    try:
        status = container.wait(timeout=60)["StatusCode"]
        output = container.logs().decode()
    finally:
        container.remove(force=True)
    assert status == 2, output
    assert output.count("\n") == 1 and output.startswith(expected), output


@pytest.mark.parametrize("method, path", [
    ("POST", "/api/kernels"), ("POST", "/api/terminals"), ("GET", "/api/contents"), ("GET", "/api/sessions"),
    ("GET", "/api/kernels")])
def test_without_the_token_the_api_refuses(lab, method, path):
    _, url = lab
    response = like_a_browser(url).request(method, base(url) + path, allow_redirects=False)
    assert response.status_code == 403, (response.status_code, response.text[:300])


def test_without_the_token_lab_redirects_to_the_login_page(lab):
    _, url = lab
    response = requests.get(f"{base(url)}/lab", allow_redirects=False)
    assert response.status_code == 302
    assert response.headers["Location"].endswith("/login?next=%2Flab")
    login = requests.get(f"{base(url)}/login")
    assert login.status_code == 200 and 'name="password"' in login.text


def test_kernel_and_terminal_websockets_need_the_token(lab):
    _, url = lab
    session = with_token(url)
    kernel = session.post(f"{base(url)}/api/kernels", json={"name": "python3"}).json()["id"]
    terminal = session.post(f"{base(url)}/api/terminals").json()["name"]
    try:
        assert websocket_status(url, f"/api/kernels/{kernel}/channels") == 403
        assert websocket_status(url, f"/terminals/websocket/{terminal}") == 403
        assert websocket_status(url, f"/api/kernels/{kernel}/channels", token_of(url)) == 101
        assert websocket_status(url, f"/terminals/websocket/{terminal}", token_of(url)) == 101
    finally:
        session.delete(f"{base(url)}/api/kernels/{kernel}")
        session.delete(f"{base(url)}/api/terminals/{terminal}")


def test_with_the_token_a_kernel_runs_code_as_the_image_user(lab):
    container, url = lab
    session = with_token(url)
    response = session.post(f"{base(url)}/api/kernels", json={"name": "python3"})
    assert response.status_code == 201, response.text
    kernel = response.json()["id"]
    try:
        out = execute(url, kernel, "import os; print(os.getuid(), os.getcwd())")
        assert out.split() == [str(IMAGE_USER_UID), "/home/trainer"], out
    finally:
        session.delete(f"{base(url)}/api/kernels/{kernel}")
    processes = container.top(ps_args="-o pid,uid,args")["Processes"]
    assert {uid for _, uid, _ in processes} == {str(IMAGE_USER_UID)}, processes


SPARK_CELL = """
import os
from pyspark import SparkContext
frame = spark.range(100000).repartition(8).cache()
print(frame.groupBy((frame.id % 7).alias("key")).count().count())
print(os.getpgid(SparkContext._gateway.proc.pid) != os.getpgrp())
"""


def test_a_kernel_with_a_spark_session_shuts_down_without_a_java_exception(lab):
    """The session's JVM runs outside the kernel's process group, so the signals a shutdown sends the group
    (ipykernel's to its children, jupyter_client's SIGTERM) do not cut Spark's own stop short: before, the server's
    log showed `java.io.IOException: Failed to delete: /tmp/blockmgr-...` for about half the kernels shut down, and
    the shutdown took 15 to 30 s."""
    container, url = lab
    session = with_token(url)
    kernel = session.post(f"{base(url)}/api/kernels", json={"name": "python3"}).json()["id"]
    since = int(time.time())
    try:
        assert execute(url, kernel, SPARK_CELL, timeout=240).split()[-2:] == ["7", "True"]
    finally:
        session.delete(f"{base(url)}/api/kernels/{kernel}").raise_for_status()
    log = container.logs(since=since).decode(errors="replace")
    assert "Exception" not in log and "Failed to delete" not in log, log[-3000:]
    left = container.exec_run(["sh", "-c", "for second in $(seq 30); do pgrep java >/dev/null || break; sleep 1; done;"
                                           "pgrep -c java; ls -d /tmp/spark-* /tmp/blockmgr-* 2>/dev/null"])
    assert left.output.decode().split() == ["0"], left.output.decode()


def test_work_folder_on_a_volume_keeps_saved_notebooks(docker_client, start_lab):
    volume = docker_client.volumes.create(f"trainstack-test-work-{uuid.uuid4().hex[:6]}")
    try:
        container = start_lab(volumes={volume.name: {"bind": NOTEBOOK_DIR, "mode": "rw"}})
        url = lab_url(container, timeout=START_TIMEOUT)
        notebook = {"type": "notebook", "content": {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}}
        saved = with_token(url).put(f"{base(url)}/api/contents/work/saved.ipynb", json=notebook)
        assert saved.status_code == 201, saved.text
        container.remove(force=True)
        output = docker_client.containers.run(image=container.image.id, command=["ls", "-n", NOTEBOOK_DIR],
                                              volumes={volume.name: {"bind": NOTEBOOK_DIR, "mode": "ro"}},
                                              remove=True).decode()
        assert re.search(rf"{IMAGE_USER_UID} +{IMAGE_USER_UID} .* saved\.ipynb", output), output
    finally:
        volume.remove(force=True)


# Stops or resumes the server process, which the runtime file names.
SIGNAL_SERVER = ("import glob, json, os, signal; [os.kill(json.load(open(path))['pid'], signal.{}) for path in "
                 "glob.glob(os.path.expanduser('~/.local/share/jupyter/runtime/jpserver-*.json'))]")


def test_lab_is_healthy_while_the_server_answers(start_lab):
    container = start_lab(healthcheck={**QUICK_HEALTH, "timeout": 2 * SECOND})
    health = wait_for_health(container)
    assert health["Status"] == "healthy", health
    assert container.exec_run(["python", "-c", SIGNAL_SERVER.format("SIGSTOP")]).exit_code == 0
    health = wait_for_health(container, "unhealthy")
    assert health["Status"] == "unhealthy", health
    assert container.exec_run(["python", "-c", SIGNAL_SERVER.format("SIGCONT")]).exit_code == 0
    health = wait_for_health(container)
    assert health["Status"] == "healthy", health


def test_lab_on_another_port_with_server_options_turns_healthy(start_lab):
    # The check follows the server's own port and base URL, however they were set.
    container = start_lab(("lab", "--ServerApp.base_url=/notebooks/"), port=9000, healthcheck=QUICK_HEALTH,
                          environment={"JUPYTER_PORT": "9000"})
    url = lab_url(container, timeout=START_TIMEOUT)
    assert host_port(container, 9000) == int(url.split(":")[2].split("/")[0])
    health = wait_for_health(container)
    assert health["Status"] == "healthy", health


def test_other_containers_are_healthy(start_lab):
    container = start_lab(("sleep", "300"), healthcheck=QUICK_HEALTH)
    health = wait_for_health(container)
    assert health["Status"] == "healthy", health
