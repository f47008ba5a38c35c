"""The docker SDK client, with the errors users hit turned into instructions, the one way a
throwaway container runs (create, start, output returned or streamed, always removed), and the one way
containers, networks and volumes are removed."""
from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any, Callable, Iterable, TextIO

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


def run_container(client: docker.DockerClient, create: dict[str, Any], out: TextIO | None = None,
                  timeout: float | None = None) -> tuple[int, str]:
    """Runs a container made from `containers.create(**create)`; returns (exit code, combined output).

    With `out`, the output is written there as it comes (and not returned). The container is removed
    whatever happens, also when something else removed it first.
    """
    try:
        container = client.containers.create(**{"detach": True, **create})
    except docker.errors.ImageNotFound:
        raise TrainstackError(f"docker: image {create['image']} is not here; build it (`invoke build`, "
                              "`invoke build --flavor NAME`) or pull it") from None
    try:
        container.start()
        output = ""
        if out is not None:
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            for chunk in container.logs(stream=True, follow=True):
                out.write(decoder.decode(chunk))
                out.flush()
        status = container.wait(timeout=timeout)["StatusCode"]
        if out is None:
            output = container.logs(stdout=True, stderr=True).decode(errors="replace")
        return status, output
    finally:
        remove_each([container], force=True)


def remove_each(objects: Iterable[Any], **remove_options: Any) -> list[str]:
    """Removes each container, network or volume (`remove(**remove_options)`); one that something else
    removed first is skipped. Returns the names removed."""
    removed = []
    for thing in objects:
        try:
            thing.remove(**remove_options)
        except docker.errors.NotFound:
            continue
        removed.append(thing.name)
    return removed


def run_in_image(client: docker.DockerClient, image: str, command: list[str], timeout: int = 300) -> tuple[int, str]:
    """Runs a command in a throwaway container of `image`; returns (exit code, combined output)."""
    return run_container(client, {"image": image, "command": command}, timeout=timeout)


def has_image(client: docker.DockerClient, image: str) -> bool:
    """Whether this engine holds `image` (nothing is pulled)."""
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return False
    return True


def local_references(client: docker.DockerClient, name: str) -> list[str]:
    """Every tag this engine holds of images named `name`, from any registry (NAME:TAG, HOST/PATH/NAME:TAG)."""
    return sorted(tag for image in client.images.list() for tag in image.tags
                  if tag.rpartition(":")[0].rpartition("/")[2] == name)


# How pool.up and nodes.up refuse an option: their error type's bad_option (TrainstackError.bad_option).
BadOption = Callable[[str, Any, str, str], TrainstackError]


def require_built_image(client: docker.DockerClient, image: str, bad_option: BadOption) -> None:
    """Refuses --image when this engine has no such image (nothing is pulled)."""
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise bad_option("--image", image, "is not built", "a built image: `invoke build` makes "
                         "trainstack:cpu, `docker images trainstack` lists them") from None


def share_directory(share: str | None, bad_option: BadOption) -> Path | None:
    """The absolute directory --share names, to mount into containers; refused when it is not a directory."""
    if share is None:
        return None
    path = Path(share).expanduser().resolve()
    if not path.is_dir():
        raise bad_option("--share", share, "is not a directory", "a directory on this machine")
    return path
