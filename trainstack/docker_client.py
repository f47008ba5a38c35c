"""The docker SDK client, with the errors users hit turned into instructions."""
from __future__ import annotations

import docker
import docker.errors

from trainstack.errors import TrainstackError


def connect() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except docker.errors.DockerException as exc:
        raise TrainstackError(
            f"docker: the daemon is not reachable ({exc.__class__.__name__}); start it "
            "(`systemctl start docker`, or `dockerd &` where there is no systemd) and check DOCKER_HOST"
        ) from exc
    return client


def run_in_image(client: docker.DockerClient, image: str, command: list[str], timeout: int = 300) -> tuple[int, str]:
    """Runs a command in a throwaway container; returns (exit code, combined output). Always removes it."""
    container = client.containers.create(image, command=command, detach=True)
    try:
        container.start()
        result = container.wait(timeout=timeout)
        output = container.logs(stdout=True, stderr=True).decode(errors="replace")
        return result["StatusCode"], output
    finally:
        container.remove(force=True)
