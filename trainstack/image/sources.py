"""Where a build's pip finds packages (indexes, a wheelhouse, a proxy's CA bundle), checked before any docker
step; none of it reaches the final image."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from trainstack.console import report
from trainstack.errors import bad_value
from trainstack.image.matrix import Flavor

BUILD_CA_PATH = "/tmp/build-ca/ca-bundle.crt"
# Set in the builder's environment by a classic build (which has no cache mounts), so no layer keeps pip's cache.
PIP_NO_CACHE_DIR = "PIP_NO_CACHE_DIR"
# Machine-wide defaults for builds (./dev writes them to .trainstack.env).
CA_BUNDLE_VARIABLE = "TRAINSTACK_CA_BUNDLE"
WHEELHOUSE_VARIABLE = "TRAINSTACK_WHEELHOUSE"
WHEELHOUSE = "a folder of .whl files"


@dataclass(frozen=True)
class SourceOptions:
    """Where the build's pip finds packages; none of it reaches the final image."""

    ca_bundle: Path | None = None
    wheelhouse: Path | None = None
    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)


def sources_for(flavor: Flavor, ca_bundle: str | None = None, wheelhouse: str | None = None,
                index_url: str | None = None, extra_index_urls: list[str] | None = None) -> SourceOptions:
    """Build options given on the command line, else from $TRAINSTACK_CA_BUNDLE and $TRAINSTACK_WHEELHOUSE,
    refused (check_sources) before a build or a render uses them.

    A wheelhouse from the environment that holds another build of torch than a GPU flavor's (this machine's
    /opt/wheels holds the CPU torch) is left out for that flavor, saying so; given as an option, it is refused.
    """
    ca_bundle = ca_bundle or os.environ.get(CA_BUNDLE_VARIABLE)
    if not wheelhouse and os.environ.get(WHEELHOUSE_VARIABLE):
        wheelhouse = os.environ[WHEELHOUSE_VARIABLE]
        foreign = foreign_torch_wheel(flavor, Path(wheelhouse))
        if foreign is not None:
            report(f"note: ${WHEELHOUSE_VARIABLE} ({wheelhouse}) is not used for the {flavor.name} flavor: "
                   f"{foreign.name} is not a CUDA {flavor.version('cuda')} build of torch")
            wheelhouse = None
    sources = SourceOptions(
        ca_bundle=Path(ca_bundle) if ca_bundle else None,
        wheelhouse=Path(wheelhouse) if wheelhouse else None,
        index_url=index_url,
        extra_index_urls=list(extra_index_urls or []),
    )
    check_sources(flavor, sources)
    return sources


def pip_source_env(sources: SourceOptions, flavor: Flavor) -> dict[str, str]:
    env = {PIP_NO_CACHE_DIR: "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_FIND_LINKS": "/tmp/wheelhouse"}
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
    """Refuses build options that cannot work, before anything is written or any docker step."""
    if sources.ca_bundle is not None and not sources.ca_bundle.is_file():
        raise bad_value("--ca-bundle", str(sources.ca_bundle), "is not a file",
                        "a PEM bundle such as /etc/ssl/certs/ca-certificates.crt")
    if sources.wheelhouse is not None:
        if not sources.wheelhouse.is_dir():
            raise bad_value("--wheelhouse", str(sources.wheelhouse), "is not a directory", WHEELHOUSE)
        if not any(sources.wheelhouse.glob("*.whl")):
            raise bad_value("--wheelhouse", str(sources.wheelhouse), "holds no .whl files", WHEELHOUSE)
        foreign = foreign_torch_wheel(flavor, sources.wheelhouse)
        if foreign is not None:
            version = parse_wheel_filename(foreign.name)[1]
            raise bad_value(
                "--wheelhouse", str(sources.wheelhouse),
                f"holds {foreign.name}, which is torch {version}, not a CUDA {flavor.version('cuda')} build; the "
                f"{flavor.name} flavor refuses it (pip would take it for torch=={version.public})",
                f"build {flavor.name} without --wheelhouse, or give a folder without that wheel")


def foreign_torch_wheel(flavor: Flavor, wheelhouse: Path) -> Path | None:
    """A torch wheel in the wheelhouse built for other hardware than a GPU flavor's CUDA (e.g. `+cpu`), if any.

    pip lets `torch==2.13.0` match `2.13.0+cpu`, so such a wheel would silently replace the CUDA build.
    """
    if not flavor.gpu:
        return None
    cuda = Version(str(flavor.version("cuda")))
    wanted_label = f"cu{cuda.major}{cuda.minor}"
    for wheel in sorted(wheelhouse.glob("torch-*.whl")):
        try:
            _, version, _, _ = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        if version.local and version.local != wanted_label:
            return wheel
    return None


def _wheelhouse_has(wheelhouse: Path | None, name: str, version: str | None) -> bool:
    """True when the wheelhouse holds a wheel of name==version (then its own index is not needed)."""
    if wheelhouse is None or version is None:
        return False
    return any(wheelhouse.glob(f"{name}-{version}-*.whl"))
