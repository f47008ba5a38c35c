"""Fixtures for real launches on this host (helpers live in launch_helpers.py)."""
from __future__ import annotations

import contextlib
import sys

import docker
import docker.errors
import pytest
from fault_harness import trainrun_env
from launch_helpers import (
    CPU_POOL_TEMPLATE,
    SCRIPTS,
    Launch,
    has_pooltemplates,
    mpi_collective,
    read_reports,
    run_trainrun,
)
from registries import PASSWORD, USER, tiny_image, tls_registry

from trainstack.image.registry import PASSWORD_ENV, USER_ENV


@pytest.fixture(scope="session")
def backend_reports(tmp_path_factory: pytest.TempPathFactory):
    """Run rank_report.py once per backend (with a real collective) and keep what each launch gave."""
    cache: dict[str, tuple[Launch, dict[int, dict]]] = {}

    def launch(backend: str) -> tuple[Launch, dict[int, dict]]:
        if backend not in cache:
            report_dir = tmp_path_factory.mktemp(f"reports-{backend}")
            script = str(SCRIPTS / "rank_report.py")
            if backend == "mpi":
                args, collective = ["mpi", "-np", "2", "--", sys.executable, script], mpi_collective()
            elif backend == "torch":
                args, collective = ["torch", "--nproc-per-node", "2", "--", script], "gloo"
            else:
                # The cluster template's conf is applied for real where the templates package is installed.
                template = ["--template", str(CPU_POOL_TEMPLATE)] if has_pooltemplates() else []
                args = ["spark", "--master", "local-cluster[2,1,1024]", *template, "--num-processes", "2",
                        "--", script]
                collective = "gloo"
            env = trainrun_env(report_dir, COLLECTIVE=collective)
            launched = run_trainrun([args[0], "--timeout", "200", *args[1:]], env)
            cache[backend] = (launched, read_reports(report_dir))
        return cache[backend]

    return launch


# The registry tests' (test_registry_push_pull, test_registry_sbom_signature): the main daemon, a TLS + basic-auth
# registry, tiny images removed after each test, and the registry's credentials in the environment.
@pytest.fixture(scope="module")
def client():
    return docker.from_env(timeout=300)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with tls_registry(tmp_path_factory.mktemp("registry")) as running:
        yield running


@pytest.fixture
def images(client):
    """Makes tiny images in the main daemon; removes them, with every tag the test gave them, after."""
    made = []

    def make(content: str):
        made.append(tiny_image(client, content))
        return made[-1]

    yield make
    for image in made:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(image.id, force=True)


@pytest.fixture
def login(monkeypatch):
    monkeypatch.setenv(USER_ENV, USER)
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
