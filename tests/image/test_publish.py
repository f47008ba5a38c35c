"""Publishing through a real registry on localhost (Debian's docker-registry): push, remove, pull, run."""
import socket
import subprocess
import time
import urllib.request

import docker.errors
import pytest

from trainstack.image.publish import push_flavor

# ./dev test (CI) leaves these out to stay under an hour; `invoke test --long` runs them (about 1.5 minutes).
pytestmark = pytest.mark.long


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def registry(tmp_path):
    port = _free_port()
    config = tmp_path / "config.yml"
    config.write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail("docker-registry did not start")
                time.sleep(0.5)
        yield f"localhost:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def _restore(docker_client, image_id: str, local_tags: list[str], pushed: list[str]) -> None:
    """Puts the built image back under its local tags, pulling it again if the test left it removed."""
    try:
        restored = docker_client.images.get(image_id)
    except docker.errors.ImageNotFound:
        restored = docker_client.images.pull(pushed[0])
    for tag in local_tags:
        repository, _, name = tag.rpartition(":")
        restored.tag(repository, name)
    for tag in pushed:
        try:
            docker_client.images.remove(tag, noprune=True)
        except docker.errors.ImageNotFound:
            pass


@pytest.mark.untags_image
def test_push_remove_pull_run(docker_client, image, registry):
    local_tags = list(image.tags)
    pushed = push_flavor("trainstack", "cpu", registry)
    assert pushed[0].startswith(f"{registry}/trainstack:cpu-py3.11-torch2.13-tf2.21-hvd")
    assert pushed[1] == f"{registry}/trainstack:cpu"
    try:
        for tag in {*local_tags, *pushed}:
            docker_client.images.remove(tag, noprune=True)  # keep the build cache's parent layers
        with pytest.raises(docker.errors.ImageNotFound):  # gone here; other flavors' images may stay
            docker_client.images.get(image.id)
        pulled = [docker_client.images.pull(reference) for reference in pushed]
        assert {image_pulled.id for image_pulled in pulled} == {image.id}
        output = docker_client.containers.run(
            pushed[1], ["python", "-c", "import horovod.torch, horovod.tensorflow; print('pulled image works')"],
            remove=True,
        )
        assert b"pulled image works" in output
    finally:
        _restore(docker_client, image.id, local_tags, pushed)
