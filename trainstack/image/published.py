"""Whether every version the flavor pins is published where the build's pip will look (its index, its extra
indexes such as torch's own, and the wheelhouse), checked before any docker step.

Indexes are read through the simple API (PEP 691 JSON, or the PEP 503 HTML page where an index serves only
that). An index that does not answer is not held against the matrix's own pins, which the build's pip may reach
through a proxy this machine has not: one warning line names what went unchecked. A pin given with `--set` is the
user's guess, so it stops the build when no index answered for it, unless `invoke build --skip-published-check`
(or TRAINSTACK_SKIP_PUBLISHED_CHECK=1) skips the check.
"""
from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from bisect import bisect_left
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.specifiers import Specifier
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from trainstack.console import report
from trainstack.errors import TrainstackError, bad_value
from trainstack.image.matrix import Flavor
from trainstack.image.sources import SourceOptions, pip_source_env

PYPI_SIMPLE_URL = "https://pypi.org/simple"
SKIP_ENV = "TRAINSTACK_SKIP_PUBLISHED_CHECK"
SKIP_OPTION = "--skip-published-check"
TIMEOUT_S = 10.0
WORKERS = 8
# pip's own Accept header: JSON where the index serves it, else the HTML page.
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01"
# Components the builder installs with pip; the others come from apt or with the frameworks.
PIP_COMPONENTS = ("torch", "torchvision", "tensorflow", "horovod", "deepspeed", "pyspark")
# How many published versions an error suggests, those nearest the one asked for.
SUGGESTED = 5


@dataclass(frozen=True)
class Pin:
    """One exact version the build's pip installs, and the matrix field it comes from."""

    field: str  # "torch.version", "python_packages.pandas"
    project: str
    version: str

    def matches(self, version: Version) -> bool:
        # pip's `==`: torch==2.13.0 takes 2.13.0+cpu too, torch==2.13.0+cpu only itself.
        return Specifier(f"=={self.version}").contains(version, prereleases=True)


def pinned_packages(flavor: Flavor) -> list[Pin]:
    """Every exact pin of the flavor that the builder's pip installs or downloads."""
    pins = [Pin(f"{component}.version", flavor.field(component, "pip_package") or component,
                str(flavor.version(component)))
            for component in PIP_COMPONENTS if component in flavor.components]
    if flavor.field("cuda", "build_tools") == "pip":
        pins.append(Pin("cuda.toolkit", "cuda-toolkit", str(flavor.field("cuda", "toolkit"))))
    pins += [Pin(f"python_packages.{name}", name, version) for name, version in sorted(flavor.python_packages.items())]
    return pins


def pip_indexes(flavor: Flavor, sources: SourceOptions) -> list[str]:
    """The indexes the builder's pip reads, from the environment the Dockerfile gives it."""
    env = pip_source_env(sources, flavor)
    indexes = [env.get("PIP_INDEX_URL", PYPI_SIMPLE_URL), *env.get("PIP_EXTRA_INDEX_URL", "").split()]
    return list(dict.fromkeys(indexes))


def overridden_pins(matrix_flavor: Flavor, flavor: Flavor) -> set[str]:
    """The fields of the pins that `flavor` (the matrix's flavor with `--set` overrides) changed."""
    return {pin.field for pin in set(pinned_packages(flavor)) - set(pinned_packages(matrix_flavor))}


def check_published(flavor: Flavor, sources: SourceOptions, must_check: Collection[str] = ()) -> None:
    """Refuses a pinned version that no index of the build (nor the wheelhouse) lists, naming its matrix field
    and the published versions nearest to it; warns about pins it could not check, and refuses those whose
    field is in `must_check` (the ones given with --set)."""
    if os.environ.get(SKIP_ENV) == "1":
        return
    indexes = pip_indexes(flavor, sources)
    pins = pinned_packages(flavor)
    wheels = {pin.project: wheelhouse_versions(sources.wheelhouse, pin.project) for pin in pins}
    pins = [pin for pin in pins if not any(map(pin.matches, wheels[pin.project]))]
    listings = fetch_listings(indexes, sorted({pin.project for pin in pins}), sources.ca_bundle)
    problems, unchecked = [], []
    for pin in pins:
        answers = [listings[index, pin.project] for index in indexes]
        published = wheels[pin.project].union(*(answer for answer in answers if isinstance(answer, set)))
        if any(map(pin.matches, published)):
            continue
        reasons = [f"{index}: {answer}" for index, answer in zip(indexes, answers) if isinstance(answer, str)]
        if reasons and pin.field in must_check:
            problems.append(str(bad_value(
                pin.field, pin.version, f"could not be checked: no index answered ({'; '.join(reasons)})",
                f"a version from a reachable index (--index-url), or {SKIP_OPTION} to build without the check")))
        elif reasons:
            unchecked.append(f"{pin.project}=={pin.version} ({'; '.join(reasons)})")
        else:
            problems.append(_unpublished(pin, published, indexes, sources.wheelhouse))
    if unchecked:
        report("warning: could not check that these pins are published, going on (the build's pip may reach what "
               f"this machine cannot): {', '.join(unchecked)}")
    if problems:
        raise TrainstackError(problems[0] if len(problems) == 1
                              else f"{len(problems)} problems:\n  " + "\n  ".join(problems))


def fetch_listings(indexes: list[str], projects: list[str],
                   ca_bundle: Path | None = None) -> dict[tuple[str, str], set[Version] | str]:
    """{(index, project): the versions listed, or why the index did not answer}, fetched concurrently.
    After an index gave no answer at all, its other projects are not asked."""
    context = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else None
    silent: dict[str, str] = {}

    def listing(index: str, project: str) -> set[Version] | str:
        if index in silent:
            return silent[index]
        try:
            return fetch_listing(index, project, context)
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}"
        except OSError as exc:
            return silent.setdefault(index, f"no answer ({getattr(exc, 'reason', None) or exc})")
        except (ValueError, KeyError) as exc:
            return f"unreadable listing ({exc!r})"

    pairs = [(index, project) for index in indexes for project in projects]
    with ThreadPoolExecutor(WORKERS) as pool:
        return dict(zip(pairs, pool.map(lambda pair: listing(*pair), pairs)))


def fetch_listing(index: str, project: str, context: ssl.SSLContext | None = None) -> set[Version]:
    """The versions an index lists for a project; none when it answers 404 (no such project there)."""
    url = f"{index.rstrip('/')}/{canonicalize_name(project)}/"
    request = urllib.request.Request(url, headers={"Accept": ACCEPT, "User-Agent": "trainstack"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as response:
            return listing_versions(response.read(), response.headers.get_content_type())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return set()
        raise


def listing_versions(body: bytes, content_type: str) -> set[Version]:
    """The versions of the files (wheels and sdists) of a simple-API project page, JSON or HTML."""
    if content_type.endswith("json"):
        names = [file["filename"] for file in json.loads(body)["files"]]
    else:
        anchors = _Anchors()
        anchors.feed(body.decode("utf-8", errors="replace"))
        names = [unquote(urlsplit(href).path.rpartition("/")[2]) for href in anchors.hrefs]
    return {parsed[1] for parsed in map(file_version, names) if parsed}


def wheelhouse_versions(wheelhouse: Path | None, project: str) -> set[Version]:
    """The versions of a project's wheels in the wheelhouse (the build context copies only its .whl files)."""
    if wheelhouse is None or not wheelhouse.is_dir():
        return set()
    name = canonicalize_name(project)
    return {parsed[1] for parsed in map(file_version, (path.name for path in wheelhouse.glob("*.whl")))
            if parsed and parsed[0] == name}


def file_version(filename: str) -> tuple[str, Version] | None:
    """(normalized project name, version) of a wheel or sdist file name; None for anything else."""
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
            return name, version
        return parse_sdist_filename(filename)
    except ValueError:  # InvalidWheelFilename, InvalidSdistFilename, InvalidVersion
        return None


def nearest_versions(published: set[Version], wanted: str, count: int = SUGGESTED) -> list[Version]:
    """Up to `count` published public versions around `wanted` (the latest when it is beyond them all);
    pre-releases only when `wanted` is one or nothing else is published."""
    target = Version(wanted)
    public = {Version(version.public) for version in published}
    finals = {version for version in public if not version.is_prerelease}
    candidates = sorted(public if target.is_prerelease or not finals else finals)
    start = max(0, min(bisect_left(candidates, target) - count // 2, len(candidates) - count))
    return candidates[start:start + count]


def _unpublished(pin: Pin, published: set[Version], indexes: list[str], wheelhouse: Path | None) -> str:
    places = " or ".join([", ".join(indexes), *([f"the wheelhouse {wheelhouse}"] if wheelhouse else [])])
    if not published:
        return str(bad_value(pin.field, pin.version, f"{pin.project} is not a project on {places}",
                             "a package published there under its distribution name"))
    nearest = ", ".join(map(str, nearest_versions(published, pin.version)))
    return str(bad_value(pin.field, pin.version, f"is not a published version of {pin.project} on {places}",
                         f"{nearest}; nearest of {len({version.public for version in published})} published"))


class _Anchors(HTMLParser):
    """The href of every <a> of a PEP 503 page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)
