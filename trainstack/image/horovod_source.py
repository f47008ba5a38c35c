"""Horovod's source as a flavor's builder compiles it, for builds outside docker: the version, the patches in order and
the build environment, taken from the flavor's `horovod` component (components.py), the one the Dockerfile renders,
and the sdist fetched, unpacked and patched as images/components/horovod.j2 does it. The GPU host check
(benchmarks/gpu_host.py) and the tests of the patches (tests/unit/images/test_horovod_patches.py, the long build in
tests/image/test_horovod_current_toolchains.py) build from here, so none of them can drift from the image."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from trainstack.errors import TrainstackError
from trainstack.image.components import build_components
from trainstack.image.matrix import PATCHES_DIR, Flavor

# Where sdists fetched for builds outside docker are kept: $TRAINSTACK_SDIST_CACHE, else ~/.cache/trainstack/sdists.
SDIST_CACHE_VARIABLE = "TRAINSTACK_SDIST_CACHE"


@dataclass(frozen=True)
class HorovodSource:
    """What the flavor's builder compiles: Horovod's version, its patch files in the order applied, its build env."""

    flavor: str
    version: str
    patches: tuple[str, ...]
    build_env: dict[str, str] = field(default_factory=dict)

    @property
    def sdist_name(self) -> str:
        return f"horovod-{self.version}.tar.gz"

    @property
    def patch_paths(self) -> list[Path]:
        return [PATCHES_DIR / patch for patch in self.patches]


def horovod_source(flavor: Flavor) -> HorovodSource:
    """The flavor's Horovod exactly as its Dockerfile's horovod step has it."""
    component = next(component for component in build_components(flavor) if component.name == "horovod")
    return HorovodSource(flavor=flavor.name, version=str(component.values["version"]), patches=component.patches,
                         build_env=dict(component.values["build_env"]))


def sdist_cache() -> Path:
    configured = os.environ.get(SDIST_CACHE_VARIABLE)
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trainstack" / "sdists"


def cached_sdist(version: str, cache: Path | None = None) -> Path:
    """Horovod's sdist from the cache, fetched first with the Dockerfile's `pip download` when it is not there."""
    folder = cache or sdist_cache()
    path = folder / f"horovod-{version}.tar.gz"
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", f"horovod=={version}",
               "-d", str(folder)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0 or not path.is_file():
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise TrainstackError(f"horovod sdist: `{' '.join(command[2:])}` failed: {tail[0]}")
    return path


def unpack_and_patch(sdist: Path, patches: list[Path], into: Path) -> Path:
    """The sdist unpacked into `into` and every patch applied in order with `patch -p1 < FILE`, as the Dockerfile
    does; the source folder. A patch that does not apply stops here, naming it and patch's own last lines."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as archive:
        top = {Path(name).parts[0] for name in archive.getnames()}
        if len(top) != 1:
            raise TrainstackError(f"{sdist}: expected one top-level folder, found {sorted(top)}")
        archive.extractall(into, filter="data")
    source = into / top.pop()
    if shutil.which("patch") is None:
        raise TrainstackError("the `patch` program is not installed (apt-get install patch)")
    for patch in patches:
        with patch.open("rb") as stdin:
            result = subprocess.run(["patch", "-p1"], stdin=stdin, cwd=source, capture_output=True, text=True)
        if result.returncode != 0:
            tail = "\n".join(result.stdout.strip().splitlines()[-5:])
            raise TrainstackError(f"{patch.name} does not apply to {source.name} after the patches before it:\n{tail}")
    return source
