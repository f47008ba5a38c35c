"""An image as files for a cluster without a docker daemon (`invoke export`): a docker archive, which `podman load`,
Apptainer (`apptainer build X.sif docker-archive:FILE`) and Enroot (`enroot import dockerd://`'s archive) read, and a
squashfs of its file system, which Enroot and Pyxis (`srun --container-image=/abs/FILE.sqsh`) and Charliecloud
(`ch-run FILE.sqsh`) run as it is.

The squashfs is zstd at level 3 in 1 MiB blocks, as NVIDIA's Enroot guide recommends for images of this size. It holds
the image's environment (its ENV: the venv's PATH, the Spark and Java homes) where each runtime reads it, since it has
no image config: /etc/environment (Enroot, as `enroot import` writes it) and /ch/environment (Charliecloud's
`ch-run --set-env`)."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker

from trainstack import docker_client
from trainstack.errors import TrainstackError
from trainstack.image.naming import flavor_image, published_image

FORMATS = ("docker-archive", "squashfs")
SQUASHFS_OPTIONS = ("-comp", "zstd", "-Xcompression-level", "3", "-b", "1M", "-noappend", "-quiet")
ENVIRONMENT_FILES = ("etc/environment", "ch/environment")


@dataclass(frozen=True)
class Exported:
    format: str
    path: Path
    bytes: int
    seconds: float


def file_stem(reference: str) -> str:
    """`trainstack:cpu` -> trainstack+cpu, as `enroot import` names its files (no ':' in a Pyxis path)."""
    return reference.rsplit("/", 1)[-1].replace(":", "+").replace("@", "+")


def environment_lines(env: list[str]) -> str:
    return "".join(f"{line}\n" for line in env)


def local_flavor_image(client: docker.DockerClient, flavor: str) -> str:
    """The name `invoke export --flavor` exports: the published one (ghcr.io/trainstack/trainstack:cpu), which a build
    of a published flavor carries and the pages use, else the build's own (trainstack:cpu)."""
    published = published_image(flavor)
    return published if docker_client.has_image(client, published) else flavor_image(flavor)


def export_image(client: docker.DockerClient, reference: str, out_dir: Path, formats: tuple[str, ...]) -> list[Exported]:
    unknown = [name for name in formats if name not in FORMATS]
    if unknown or not formats:
        raise TrainstackError.bad_option("--format", ",".join(formats), "names no export format",
                                         ", ".join(FORMATS) + " (comma-separated)")
    if "squashfs" in formats and shutil.which("mksquashfs") is None:
        raise TrainstackError.bad_option("--format", "squashfs", "needs mksquashfs",
                                         "apt-get install squashfs-tools, or --format docker-archive")
    if not docker_client.has_image(client, reference):
        raise TrainstackError.bad_option("--image", reference, "is not an image of this docker engine",
                                         "a built flavor (invoke build) or a pulled image")
    image = client.images.get(reference)
    out_dir.mkdir(parents=True, exist_ok=True)
    exported = []
    for name in formats:
        started = time.monotonic()
        path = (_docker_archive if name == "docker-archive" else _squashfs)(client, image, reference, out_dir)
        exported.append(Exported(name, path, path.stat().st_size, round(time.monotonic() - started, 1)))
    return exported


def archive_names(reference: str, tags: list[str]) -> list[str]:
    """The names a docker archive carries, so that `podman load` (or Apptainer, or Enroot) gives the image every
    name the pages and rendered templates use: the exported reference, then the image's other tags (a build's
    published ones, ghcr.io/trainstack/trainstack:cpu and its content tag, among them)."""
    return list(dict.fromkeys([reference, *sorted(tags)]))


def _docker_archive(client: docker.DockerClient, image, reference: str, out_dir: Path) -> Path:
    path = out_dir / f"{file_stem(reference)}.tar"
    partial = path.with_suffix(".tar.partial")
    try:
        # `docker save NAME...`: the SDK's image.save() names one tag only.
        response = client.api._get(client.api._url("/images/get"),
                                   params={"names": archive_names(reference, image.tags)}, stream=True)
        client.api._raise_for_status(response)
        with open(partial, "wb") as f:
            for chunk in response.iter_content(chunk_size=1 << 20):
                f.write(chunk)
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def _squashfs(client: docker.DockerClient, image, reference: str, out_dir: Path) -> Path:
    """The container file system (`docker export` of a container never started), unpacked with its owners, the
    environment files added, then mksquashfs; nothing is left behind when a step fails."""
    path = out_dir / f"{file_stem(reference)}.sqsh"
    container = client.containers.create(image.id, command=["true"])
    root = Path(tempfile.mkdtemp(prefix="trainstack-export-", dir=out_dir))
    try:
        untar = subprocess.Popen(["tar", "-x", "--numeric-owner", "-C", str(root)], stdin=subprocess.PIPE)
        assert untar.stdin is not None
        try:
            for chunk in container.export():
                untar.stdin.write(chunk)
        finally:
            untar.stdin.close()
        if untar.wait() != 0:
            raise TrainstackError(f"export: unpacking {reference}'s file system failed (tar exit {untar.returncode})")
        env = environment_lines(image.attrs["Config"].get("Env") or [])
        for name in ENVIRONMENT_FILES:
            (root / name).parent.mkdir(exist_ok=True)
            (root / name).write_text(env)
        partial = out_dir / f"{path.name}.partial"
        result = subprocess.run(["mksquashfs", str(root), str(partial), *SQUASHFS_OPTIONS], capture_output=True,
                                text=True)
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise TrainstackError(f"export: mksquashfs failed: {result.stderr.strip()[-500:]}")
        partial.replace(path)
    finally:
        container.remove(force=True)
        shutil.rmtree(root, ignore_errors=True)
    return path
