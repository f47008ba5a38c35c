"""Checks a GPU flavor's cuda/cudnn/nccl claims against what pip's resolver really picks.

The frameworks are resolved the way the GPU image installs them (torch from PyPI,
tensorflow[and-cuda]), with dependencies, for the image's Python and Linux x86_64, by a
pinned pip that reads neither this machine's pip configuration nor its installed packages.
"""
from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import venv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from packaging.utils import canonicalize_name
from packaging.version import Version

from trainstack.errors import TrainstackError
from trainstack.image.matrix import Flavor
from trainstack.image.requirements import framework_requirements

PYPI_SIMPLE_URL = "https://pypi.org/simple"
# A pinned pip, since resolution differs across versions; older ones (e.g. 23.2) also
# download every resolved wheel on --dry-run, this one stops after resolving.
RESOLVER_PIP_VERSION = "26.3"
# Debian 12 (the images' base) has glibc 2.36, so manylinux_2_5 .. manylinux_2_36 wheels install.
GLIBC_MINORS = range(36, 4, -1)
# pip matches tags literally: legacy-tagged wheels (e.g. only manylinux2014) need their own alias.
LEGACY_MANYLINUX = ("manylinux2014", "manylinux2010", "manylinux1")
ARCH = "x86_64"

CUDA_MAJOR_SUFFIX = re.compile(r"-cu(\d+)$")
CUDA_RUNTIME = "nvidia-cuda-runtime"
# The CUDA 13 metapackage; its version stands in when no runtime wheel is resolved.
CUDA_TOOLKIT = "cuda-toolkit"
LIBRARY_OF_COMPONENT = {"cudnn": "nvidia-cudnn", "nccl": "nvidia-nccl"}
CONFLICT_HEADER = "The conflict is caused by:"
CONFLICT_PARTY = re.compile(r"(?:depends on|requested(?: \(constraint\))?) ([A-Za-z0-9][A-Za-z0-9._-]*)")


class ResolverError(TrainstackError):
    """The resolver cannot run for this flavor or on this machine."""


@dataclass(frozen=True)
class Resolution:
    flavor: str
    requirements: list[str]
    resolved: dict[str, str]
    mismatches: list[str]


def gpu_framework_requirements(flavor: Flavor) -> list[str]:
    """The builder's first requirement file (requirements.framework_requirements): what decides the CUDA stack."""
    if not flavor.gpu:
        raise ResolverError(f"resolver: flavor {flavor.name!r} has no cuda component; only GPU flavors are checked")
    return framework_requirements(flavor)


def create_resolver_pip(directory: Path) -> list[str]:
    """Makes a venv under `directory` holding the pinned pip; returns the command that runs it."""
    venv.create(directory, with_pip=False)
    python = directory / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--isolated",
               "--disable-pip-version-check", "--quiet", f"pip=={RESOLVER_PIP_VERSION}"]
    completed = subprocess.run(install, capture_output=True, text=True, env=clean_pip_env())
    if completed.returncode != 0:
        raise ResolverError(f"resolver: could not install pip {RESOLVER_PIP_VERSION}:\n{completed.stderr}")
    return [str(python), "-m", "pip"]


def resolve(flavor: Flavor, pip: Sequence[str] | None = None) -> Resolution:
    """Resolves the flavor's frameworks with pip and compares cuda, cudnn and nccl with the matrix.

    `pip` is a command from create_resolver_pip, to share one across calls; by default one is made.
    """
    python_version = str(flavor.version("python"))
    _check_host_matches(python_version)
    requirements = gpu_framework_requirements(flavor)
    with tempfile.TemporaryDirectory(prefix="trainstack-resolve-") as tmp:
        pip_command = list(pip) if pip else create_resolver_pip(Path(tmp) / "venv")
        report_path = Path(tmp) / "report.json"
        command = pip_command + dry_run_arguments(python_version, report_path) + requirements
        completed = subprocess.run(command, capture_output=True, text=True, env=clean_pip_env())
        if completed.returncode != 0:
            failure = resolution_failure(completed.stdout + completed.stderr)
            message = f"pip cannot resolve flavor {flavor.name!r} ({', '.join(requirements)}): {failure}"
            return Resolution(flavor.name, requirements, {}, [message])
        resolved = resolved_versions(json.loads(report_path.read_text()))
    return Resolution(flavor.name, requirements, resolved, compare_with_flavor(flavor, resolved))


def clean_pip_env() -> dict[str, str]:
    """This environment without PIP_* settings (find-links, ...) and without any pip.conf."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PIP_")}
    # --isolated skips user config only; os.devnull is pip's switch for skipping global files
    # too, whose constraint file would cap what the resolver may pick.
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def dry_run_arguments(python_version: str, report_path: Path) -> list[str]:
    """`pip install` options that resolve for the image's Python on Linux without installing."""
    platforms = [f"manylinux_2_{minor}_{ARCH}" for minor in GLIBC_MINORS]
    platforms += [f"{legacy}_{ARCH}" for legacy in LEGACY_MANYLINUX]
    return [
        "install", "--isolated", "--disable-pip-version-check", "--progress-bar", "off",
        "--dry-run", "--ignore-installed",
        "--report", str(report_path),
        "--index-url", PYPI_SIMPLE_URL,
        # Without PEP 658 metadata on the index, pip would download whole wheels (GBs of CUDA)
        # to read their dependencies; range requests read only the METADATA file.
        "--use-feature", "fast-deps",
        "--only-binary", ":all:", "--implementation", "cp", "--python-version", python_version,
        *[option for name in platforms for option in ("--platform", name)],
    ]


def _check_host_matches(python_version: str) -> None:
    # --python-version and --platform choose wheels, but pip evaluates environment markers
    # (python_version, platform_machine, ...) against the interpreter running it.
    host_python = f"{sys.version_info.major}.{sys.version_info.minor}"
    if (host_python, sys.platform, platform.machine()) != (python_version, "linux", ARCH):
        raise ResolverError(
            f"resolver: needs Python {python_version} on Linux {ARCH} to evaluate dependency markers "
            f"like the image; this is Python {host_python} on {sys.platform} {platform.machine()}"
        )


def resolved_versions(report: dict[str, Any]) -> dict[str, str]:
    """{distribution: version} of every item pip's installation report would install."""
    return {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in report["install"]
    }


def resolution_failure(pip_output: str) -> str:
    """The conflicting requirement(s) and why, from pip's output; else its ERROR lines."""
    lines = pip_output.splitlines()
    start = next((i + 1 for i, line in enumerate(lines) if line.strip() == CONFLICT_HEADER), None)
    if start is not None:
        end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
        causes = [line.strip().split(";")[0] for line in lines[start:end]]
        return f"conflict on {', '.join(_conflicting_names(causes))}: {'; '.join(causes)}"
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR: ")]
    return "; ".join(errors) or pip_output.strip()[-2000:]


def _conflicting_names(causes: list[str]) -> list[str]:
    counts: dict[str, int] = defaultdict(int)
    for cause in causes:
        for name in {canonicalize_name(match) for match in CONFLICT_PARTY.findall(cause)}:
            counts[name] += 1
    shared = [name for name, count in counts.items() if count > 1]
    return shared or list(counts)


def compare_with_flavor(flavor: Flavor, resolved: dict[str, str]) -> list[str]:
    """Messages for each way the resolved set contradicts the flavor's CUDA stack."""
    cuda = Version(str(flavor.version("cuda")))
    messages = _cuda_mismatch(cuda, resolved)
    for component, library in LIBRARY_OF_COMPONENT.items():
        messages += _library_mismatch(component, flavor.version(component), library, resolved)
    return messages + cuda_major_duplicates(resolved) + foreign_cuda_builds(cuda.major, resolved)


def _cuda_mismatch(cuda: Version, resolved: dict[str, str]) -> list[str]:
    found = _library_builds(CUDA_RUNTIME, resolved) or _library_builds(CUDA_TOOLKIT, resolved)
    if not found:
        return [f"cuda: matrix says {cuda}, but pip resolves no {CUDA_RUNTIME} or {CUDA_TOOLKIT} wheel"]
    name, version = found[0]
    if Version(version).release[:2] != cuda.release[:2]:
        return [f"cuda: matrix says {cuda}, pip resolves {name} {version}"]
    return []


def _library_mismatch(component: str, claimed: str | None, library: str, resolved: dict[str, str]) -> list[str]:
    found = _library_builds(library, resolved)
    if not found:
        return [f"{component}: matrix says {claimed}, but pip resolves no {library} wheel"]
    name, version = found[0]
    if claimed is None or Version(version) != Version(claimed):
        return [f"{component}: matrix says {claimed}, pip resolves {name} {version}"]
    return []


def cuda_major_duplicates(resolved: dict[str, str]) -> list[str]:
    """One message per library resolved under more than one CUDA major (e.g. -cu12 and -cu13)."""
    builds_by_library: dict[str, list[str]] = defaultdict(list)
    for name in sorted(resolved):
        if name.startswith("nvidia-"):
            builds_by_library[CUDA_MAJOR_SUFFIX.sub("", name)].append(name)
    return [
        f"{library} is resolved twice, for different CUDA majors: "
        + ", ".join(f"{name} {resolved[name]}" for name in builds)
        for library, builds in builds_by_library.items()
        if len(builds) > 1
    ]


def foreign_cuda_builds(cuda_major: int, resolved: dict[str, str]) -> list[str]:
    """One message per -cuNN wheel built for another CUDA major than the flavor's."""
    return [
        f"{name} {version} is built for CUDA {match.group(1)}, the flavor is on CUDA {cuda_major}"
        for name, version in sorted(resolved.items())
        if (match := CUDA_MAJOR_SUFFIX.search(name)) and int(match.group(1)) != cuda_major
    ]


def _library_builds(library: str, resolved: dict[str, str]) -> list[tuple[str, str]]:
    """(distribution, version) of `library` under any CUDA suffix: nvidia-nccl-cu12, nvidia-nccl, ..."""
    return [
        (name, version) for name, version in sorted(resolved.items())
        if CUDA_MAJOR_SUFFIX.sub("", name) == library
    ]
