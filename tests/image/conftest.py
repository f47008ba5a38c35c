"""Runs commands inside the built image through the docker SDK; every container is removed afterwards."""
from __future__ import annotations

import os
from pathlib import Path

import docker
import docker.errors
import pytest
from fault_harness import once_more_after_gloo_abort

from trainrun.image_contract import JUPYTER_PORT
from trainstack.docker_client import run_container
from trainstack.image.matrix import Flavor, load_matrix

IMAGE = os.environ.get("TRAINSTACK_TEST_IMAGE", "trainstack:cpu")
UNITS_DIR = Path(__file__).parent / "units"
# The rank scripts the integration tests run on the host, shared with the image tests.
RANKS_DIR = Path(__file__).parents[1] / "support" / "ranks"




class ImageRunner:
    def __init__(self, client: docker.DockerClient, image: str):
        self.client = client
        self.image = image

    def run(self, command: list[str] | str, expect: int = 0, timeout: int = 300, env: dict | None = None,
            volumes: dict | None = None, user: str | None = None, options: dict | None = None) -> str:
        """Runs `command` with the test units at /units and the rank scripts at /ranks; asserts the exit code;
        returns the output. `options` are further arguments of containers.create (e.g. read_only, tmpfs)."""
        status, output = once_more_after_gloo_abort(
            lambda: self.run_status(command, timeout, env, volumes, user, options), str(command), expect)
        assert status == expect, f"exit {status}, expected {expect}; output:\n{output[-4000:]}"
        return output

    def run_status(self, command: list[str] | str, timeout: int = 300, env: dict | None = None,
                   volumes: dict | None = None, user: str | None = None,
                   options: dict | None = None) -> tuple[int, str]:
        """Runs `command` as `run` does; returns its exit code and output."""
        mounts = {str(UNITS_DIR): {"bind": "/units", "mode": "ro"}, str(RANKS_DIR): {"bind": "/ranks", "mode": "ro"},
                  **(volumes or {})}
        return run_container(self.client, {
            "image": self.image, "command": command, "environment": env or {}, "volumes": mounts,
            "shm_size": "1g", "user": user, **(options or {})}, timeout=timeout)


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    return docker.from_env(timeout=900)


@pytest.fixture(scope="session")
def built_image(docker_client):
    """Returns the named image, or fails the test saying how to build it."""

    def get(name: str, how_to_build: str) -> docker.models.images.Image:
        try:
            return docker_client.images.get(name)
        except docker.errors.ImageNotFound:
            pytest.fail(f"{name} is not built; run `{how_to_build}`")

    return get


@pytest.fixture(scope="session")
def runner_for(docker_client):
    """An ImageRunner for another image than the session's (e.g. a GPU image)."""
    return lambda image: ImageRunner(docker_client, image)


@pytest.fixture(scope="session")
def image(built_image) -> docker.models.images.Image:
    return built_image(IMAGE, "invoke build` (or set TRAINSTACK_TEST_IMAGE")


@pytest.fixture(scope="session")
def image_flavor(image) -> Flavor:
    """The matrix's flavor of the image under test (its `io.trainstack.flavor` label)."""
    return load_matrix().flavor(image.labels["io.trainstack.flavor"])


@pytest.fixture(scope="session")
def in_image(docker_client, image) -> ImageRunner:
    return ImageRunner(docker_client, IMAGE)


@pytest.fixture(scope="module")
def start_lab(docker_client, image):
    """Starts containers of the image (`lab` by default), the port (and `also_published`'s) published on 127.0.0.1
    at a free host port; removes them at the end of the module."""
    started = []

    def start(command: tuple[str, ...] = ("lab",), port: int = JUPYTER_PORT, also_published: tuple[int, ...] = (),
              **kwargs):
        container = docker_client.containers.run(
            image.id, list(command), detach=True,
            ports={f"{published}/tcp": ("127.0.0.1", None) for published in (port, *also_published)},
            labels={"io.trainstack.test": "lab"}, **kwargs)
        started.append(container)
        return container

    yield start
    for container in started:
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:  # a test removed it
            pass
