"""Makes a Debian base image without a registry: debootstrap a root filesystem and import it."""
from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from trainstack import docker_client
from trainstack.console import report
from trainstack.errors import TrainstackError

DEFAULT_BASE_TAG = "trainstack/debian-base:bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"


def make_base_image(tag: str = DEFAULT_BASE_TAG, suite: str = "bookworm", mirror: str = DEBIAN_MIRROR) -> str:
    """Builds `tag` from `debootstrap --variant=minbase`; returns the image id."""
    if shutil.which("debootstrap") is None:
        raise TrainstackError("base: debootstrap is not installed; run `apt-get install debootstrap`")
    client = docker_client.connect()
    with tempfile.TemporaryDirectory(prefix="trainstack-rootfs-") as workdir:
        rootfs = Path(workdir) / "rootfs"
        report(f"base: debootstrap {suite} from {mirror} (a few minutes)")
        process = subprocess.Popen(["debootstrap", "--variant=minbase", suite, str(rootfs), mirror],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tail: list[str] = []
        for line in process.stdout:
            tail = [*tail[-40:], line]
            # debootstrap's own progress lines: I: Retrieving..., I: Extracting..., I: Installing...
            if line.startswith("I: ") and not line.startswith(("I: Retrieving", "I: Validating")):
                report(f"base: {line.rstrip()}")
        if process.wait() != 0:
            raise TrainstackError(f"base: debootstrap {suite} failed:\n{''.join(tail)}")
        # As Debian's own images: no package lists or downloaded packages (a step that removed them would leave
        # whiteouts, stamped with the time of its build, in its layer).
        for leftover in [*(rootfs / "var/lib/apt/lists").iterdir(), *(rootfs / "var/cache/apt").rglob("*.deb"),
                         *(rootfs / "var/cache/apt").glob("*.bin")]:
            if leftover.is_dir():
                shutil.rmtree(leftover)
            else:
                leftover.unlink()
        report(f"base: importing the root filesystem as {tag}")
        archive = Path(workdir) / "rootfs.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(rootfs, arcname=".")
        repository, _, name = tag.rpartition(":")
        client.api.import_image_from_file(str(archive), repository=repository, tag=name)
    return client.images.get(tag).id
