"""Where a build's pip finds packages (indexes, a wheelhouse, a proxy's CA bundle), checked before any docker
step; none of it reaches the final image."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from trainstack.errors import TrainstackError
from trainstack.matrix import Flavor

BUILD_CA_PATH = "/tmp/build-ca/ca-bundle.crt"


@dataclass(frozen=True)
class SourceOptions:
    """Where the build's pip finds packages; none of it reaches the final image."""

    ca_bundle: Path | None = None
    wheelhouse: Path | None = None
    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)


def pip_source_env(sources: SourceOptions, flavor: Flavor) -> dict[str, str]:
    env = {"PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_FIND_LINKS": "/tmp/wheelhouse"}
    if sources.index_url:
        env["PIP_INDEX_URL"] = sources.index_url
    torch_index = flavor.field("torch", "index_url")
    if _wheelhouse_has(sources.wheelhouse, "torch", flavor.version("torch")):
        torch_index = None
    extra = sources.extra_index_urls or [url for url in [torch_index] if url]
    if extra:
        env["PIP_EXTRA_INDEX_URL"] = " ".join(extra)
    return env


def check_sources(flavor: Flavor, sources: SourceOptions) -> None:
    """Refuses build options that cannot work, before any docker step."""
    if sources.ca_bundle is not None and not sources.ca_bundle.is_file():
        raise TrainstackError(f"--ca-bundle: {sources.ca_bundle} is not a file; give a PEM bundle such as /etc/ssl/certs/ca-certificates.crt")
    if sources.wheelhouse is not None:
        if not sources.wheelhouse.is_dir():
            raise TrainstackError(f"--wheelhouse: {sources.wheelhouse} is not a directory; give a folder of .whl files")
        if not any(sources.wheelhouse.glob("*.whl")):
            raise TrainstackError(f"--wheelhouse: {sources.wheelhouse} holds no .whl files")
        if flavor.gpu:
            _refuse_foreign_torch_builds(flavor, sources.wheelhouse)


def _refuse_foreign_torch_builds(flavor: Flavor, wheelhouse: Path) -> None:
    """A GPU flavor's pip must never take a CPU (or other CUDA) torch from the wheelhouse.

    pip lets `torch==2.13.0` match `2.13.0+cpu`, so such a wheel would silently replace the CUDA build.
    """
    cuda = Version(str(flavor.version("cuda")))
    wanted_label = f"cu{cuda.major}{cuda.minor}"
    for wheel in sorted(wheelhouse.glob("torch-*.whl")):
        try:
            _, version, _, _ = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        if version.local and version.local != wanted_label:
            raise TrainstackError(
                f"--wheelhouse: {wheel} is torch {version}, not a CUDA {cuda} build; the {flavor.name} flavor "
                f"refuses it (pip would take it for torch=={version.public}). Build {flavor.name} without "
                f"--wheelhouse (unset TRAINSTACK_WHEELHOUSE), or give a folder without that wheel"
            )


def _wheelhouse_has(wheelhouse: Path | None, name: str, version: str | None) -> bool:
    """True when the wheelhouse holds a wheel of name==version (then its own index is not needed)."""
    if wheelhouse is None or version is None:
        return False
    return any(wheelhouse.glob(f"{name}-{version}-*.whl"))
