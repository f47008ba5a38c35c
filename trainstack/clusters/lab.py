"""A JupyterLab container of the image (the entrypoint's `lab` role): the URL with its token, read from the
server's log, where it prints it once at start, rewritten for the host port it is published on; and the URL of the
MLflow server beside it (MLFLOW_PORT), once it answers."""
from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from typing import Callable, TypeVar

import docker.errors
from docker.models.containers import Container

from trainrun.image_contract import JUPYTER_PORT, MLFLOW_PORT
from trainstack.errors import TrainstackError

# The server's URL as it logs it: its port, path (base URL + lab) and token, `...` when the user gave it one.
_LOGGED_URL = re.compile(r"http://127\.0\.0\.1:(\d+)(/\S*)\?token=(\w+|\.\.\.)")
# What jupyter_server logs once it listens, before the URLs.
_SERVING = " is running at:"
T = TypeVar("T")


def logged_token(logs: str) -> str | None:
    """The token in the URL the server printed: None before it printed it, or when it was given one."""
    found = _LOGGED_URL.search(logs.partition(_SERVING)[2])
    return found.group(3) if found and found.group(3) != "..." else None


def host_port(container: Container, port: int = JUPYTER_PORT) -> int:
    container.reload()
    return int(container.ports[f"{port}/tcp"][0]["HostPort"])


def lab_url(container: Container, token: str | None = None, timeout: float = 120) -> str:
    """`http://127.0.0.1:PORT/lab?token=TOKEN` (PORT: the host's) of a started `lab` container once the server is up; `token` is the
    one it was given (JUPYTER_TOKEN), which the server does not print; else the random one it printed."""
    logs = serving_logs(container, timeout)
    port, path, printed = _LOGGED_URL.search(logs.partition(_SERVING)[2]).groups()
    token = token or logged_token(logs)
    if token is None:
        raise TrainstackError(f"JupyterLab in {container.name} printed `token={printed}` and was given none")
    return f"http://127.0.0.1:{host_port(container, int(port))}{path}?token={token}"


def serving_logs(container: Container, timeout: float = 120) -> str:
    """The log of a started `lab` container once the server says it is running."""
    def served() -> str | None:
        logs = container.logs().decode(errors="replace")
        return logs if _LOGGED_URL.search(logs.partition(_SERVING)[2]) else None

    return _wait_for(container, "JupyterLab", served, timeout)


def mlflow_url(container: Container, timeout: float = 120) -> str:
    """`http://127.0.0.1:PORT` (PORT: the host's) of the MLflow server in a started `lab` container once its /health
    answers."""
    url = f"http://127.0.0.1:{host_port(container, MLFLOW_PORT)}"

    def answers() -> str | None:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5):
                return url
        except (urllib.error.URLError, OSError):
            return None

    return _wait_for(container, "MLflow", answers, timeout)


def _wait_for(container: Container, server: str, ready: Callable[[], T | None], timeout: float) -> T:
    """ready()'s first value that is not None, asked once a second; an error with the tail of the container's log
    when the container exits first or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = ready()
            container.reload()
        except docker.errors.NotFound:
            raise TrainstackError(f"{server} in {container.name}: the container was removed") from None
        if found is not None:
            return found
        if container.status in ("exited", "dead"):
            raise TrainstackError(f"{server} in {container.name} exited before it served:\n{_log_tail(container)}")
        if time.monotonic() > deadline:
            raise TrainstackError(f"{server} in {container.name} did not start in {timeout:.0f}s:\n"
                                  f"{_log_tail(container)}")
        time.sleep(1)


def _log_tail(container: Container) -> str:
    return container.logs().decode(errors="replace")[-2000:]
