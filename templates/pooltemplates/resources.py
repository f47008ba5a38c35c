"""Files shipped inside the package: the pool templates and the GPU discovery script."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

DISCOVERY_SCRIPT = "scripts/discover-gpus.sh"


def pools_dir() -> Path:
    """The directory of packaged template YAML files (the package installs unzipped)."""
    return Path(str(resources.files("pooltemplates").joinpath("pools")))


def package_file(relative: str) -> Path:
    """The on-disk path of a file shipped in pooltemplates, e.g. DISCOVERY_SCRIPT for bind mounts."""
    path = Path(str(resources.files("pooltemplates").joinpath(relative)))
    if not path.is_file():
        raise FileNotFoundError(f"pooltemplates ships no file {relative!r}")
    return path
