"""The drift report of `invoke matrix.outdated`: for each flavor, the newest version on the package index of every pin
that is a PyPI distribution, and the matrix rules that hold it back.

What holds a pin back is found as `--set KEY=NEWEST` finds it: the flavor with that one pin moved to the newest
version (apply_overrides), and the rules it then breaks (broken_rules). The index is asked only when the report is
made, never by a build or the docs; a distribution it gives no version of gets a row saying why.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from trainstack.image.matrix import Flavor, Rule, apply_overrides, broken_rules
from trainstack.image.published import PIP_COMPONENTS
from trainstack.image.scan import http_json

PYPI_JSON_URL = "https://pypi.org/pypi"
WORKERS = 8
# The pins that are PyPI distributions under another name, by their `--set` key ({cuda}: the flavor's CUDA major
# version). Beside these and PIP_COMPONENTS, components come from apt or the base image (debian, python, java,
# openmpi) or are a CUDA release that many wheels make up (cuda), and are left out.
DISTRIBUTIONS = {
    "nccl": "nvidia-nccl-cu{cuda}",  # NVIDIA's NCCL wheel, the one torch's wheel requires
    "cudnn": "nvidia-cudnn-cu{cuda}",
    "cuda.toolkit": "cuda-toolkit",  # nvcc and headers of a builder with build_tools: pip (gpu-cu13)
}

# A distribution's newest version on an index; raises IndexUnanswered saying why it has none.
NewestVersion = Callable[[str], str]


class IndexUnanswered(Exception):
    """The index gave no version of a distribution; the message says why, in one line."""


@dataclass(frozen=True)
class Drift:
    """One pin of a flavor against the index."""

    flavor: str
    key: str  # what `--set KEY=VERSION` takes: torch, nccl, tf_keras
    package: str  # its name on the index: nvidia-nccl-cu12 for nccl, tensorflow-cpu for the cpu flavor's tensorflow
    pinned: str
    newest: str | None = None  # None: the index gave none (index_error says why)
    held_back_by: tuple[str, ...] = ()  # the ids of the rules the flavor breaks with `newest`
    index_error: str | None = None

    @property
    def status(self) -> str:
        if self.newest is None:
            return "index error"
        if self.held_back_by:
            return "held back"
        # A pin's local label (2.13.0+cpu, from torch's own index) is newer than the index's 2.13.0.
        return "up to date" if Version(self.newest) <= Version(self.pinned) else "bump"

    @property
    def held_back(self) -> str:
        """The "held back by" column."""
        status = self.status
        if status == "index error":
            return f"index: {self.index_error}"
        if status == "held back":
            return ", ".join(self.held_back_by)
        return "nothing: a bump" if status == "bump" else status

    @property
    def shown_package(self) -> str:
        same = canonicalize_name(self.package) == canonicalize_name(self.key)
        return self.package if same else f"{self.package} ({self.key})"


def pypi_newest_version(distribution: str) -> str:
    """PyPI's newest release of a distribution: its JSON API's info.version."""
    url = f"{PYPI_JSON_URL}/{canonicalize_name(distribution)}/json"
    try:
        status, answer = http_json(url)
    except OSError as exc:
        raise IndexUnanswered(f"{url}: no answer ({getattr(exc, 'reason', None) or exc})") from None
    info = answer.get("info") if isinstance(answer, dict) else None
    version = info.get("version") if isinstance(info, dict) else None
    if status != 200 or not isinstance(version, str):
        raise IndexUnanswered(f"{url}: HTTP {status}" + (", an answer without info.version" if status == 200 else ""))
    return version


def flavor_pins(flavor: Flavor) -> list[tuple[str, str, str]]:
    """(`--set` key, distribution, pinned version) of each of the flavor's pins that is a PyPI distribution: the
    components pip installs, the NVIDIA wheels, then python_packages in the matrix's order."""
    cuda = (flavor.version("cuda") or "").partition(".")[0]
    pins = [(component, flavor.field(component, "pip_package") or component, str(flavor.version(component)))
            for component in PIP_COMPONENTS if component in flavor.components]
    for key, distribution in DISTRIBUTIONS.items():
        component, _, field = key.partition(".")
        version = flavor.field(component, field or "version")
        if version is not None:
            pins.append((key, distribution.format(cuda=cuda), str(version)))
    return pins + [(name, name, version) for name, version in flavor.python_packages.items()]


def drift(flavors: Iterable[Flavor], rules: list[Rule], index: NewestVersion | None = None) -> list[Drift]:
    """A row for each pin of each flavor; each distribution is asked of the index (default: PyPI) once."""
    index = index or pypi_newest_version
    pins = [(flavor, *pin) for flavor in flavors for pin in flavor_pins(flavor)]
    distributions = sorted({distribution for _, _, distribution, _ in pins})
    with ThreadPoolExecutor(WORKERS) as pool:
        newest = dict(zip(distributions, pool.map(lambda distribution: _newest(index, distribution), distributions)))
    return [_drift(flavor, rules, key, distribution, pinned, newest[distribution])
            for flavor, key, distribution, pinned in pins]


def _newest(index: NewestVersion, distribution: str) -> Version | str:
    """The index's newest version of a distribution, or why it gave none."""
    try:
        answer = index(distribution)
    except IndexUnanswered as exc:
        return str(exc)
    try:
        return Version(answer)
    except InvalidVersion:
        return f"answered {answer!r}, not a version (PEP 440)"


def _drift(flavor: Flavor, rules: list[Rule], key: str, distribution: str, pinned: str,
           newest: Version | str) -> Drift:
    if isinstance(newest, str):
        return Drift(flavor.name, key, distribution, pinned, index_error=newest)
    if newest <= Version(pinned):
        return Drift(flavor.name, key, distribution, pinned, str(newest))
    moved = apply_overrides(flavor, {key: str(newest)})
    return Drift(flavor.name, key, distribution, pinned, str(newest),
                 tuple(rule.id for rule in rules if broken_rules(moved, [rule])))


def drift_table(rows: list[Drift]) -> str:
    """A plain-text table per flavor, in the rows' order: package, pinned, newest, held back by."""
    sections = []
    for flavor in dict.fromkeys(row.flavor for row in rows):
        lines = [("package", "pinned", "newest", "held back by")] + [
            (row.shown_package, row.pinned, row.newest or "-", row.held_back) for row in rows if row.flavor == flavor]
        widths = [max(len(line[column]) for line in lines) for column in range(4)]
        table = "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines)
        sections.append(f"flavor {flavor}\n{table}")
    return "\n\n".join(sections)


def drift_json(rows: list[Drift]) -> str:
    """The rows as a JSON list, each with its status: up to date, bump, held back or index error."""
    return json.dumps([{**asdict(row), "held_back_by": list(row.held_back_by), "status": row.status}
                       for row in rows], indent=1)
