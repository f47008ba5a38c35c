"""A JupyterLab container of the image (the entrypoint's `lab` role): the URL with its token, read from the
server's log, where it prints it once at start, rewritten for the host port it is published on."""
from __future__ import annotations

import re
import time

import docker.errors
from docker.models.containers import Container

from trainrun.image_contract import JUPYTER_PORT
from trainstack.errors import TrainstackError

# The server's URL as it logs it: its port, path (base URL + lab) and token, `...` when the user gave it one.
_LOGGED_URL = re.compile(r"http://127\.0\.0\.1:(\d+)(/\S*)\?token=(\w+|\.\.\.)")
# What jupyter_server logs once it listens, before the URLs.
_SERVING = " is running at:"


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
    deadline = time.monotonic() + timeout
    while True:
        try:
            container.reload()
            logs = container.logs().decode(errors="replace")
        except docker.errors.NotFound:
            raise TrainstackError(f"JupyterLab in {container.name}: the container was removed") from None
        if _LOGGED_URL.search(logs.partition(_SERVING)[2]):
            return logs
        if container.status in ("exited", "dead"):
            raise TrainstackError(f"JupyterLab in {container.name} exited before it served:\n{logs[-2000:]}")
        if time.monotonic() > deadline:
            raise TrainstackError(f"JupyterLab in {container.name} did not start in {timeout:.0f}s:\n"
                                  f"{logs[-2000:]}")
        time.sleep(1)

