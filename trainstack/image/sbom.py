"""The image's SBOM on the host: read from a built image (or a file) and checked against what the image holds.

images/scripts/write_sbom.py writes it inside the image at build time, at identity.SBOM_PATH beside the
manifest: a CycloneDX 1.5 document whose components are the venv's distributions (pkg:pypi purls; the
project's own trainrun and pooltemplates carry no purl) and the installed Debian packages (pkg:deb purls with
the source package as the property `debian:source`), each with its licences or, in the property
`trainstack:license-unknown`, why they could not be read. It lives in the image, so every tag of the image, local or
pushed, carries it; `invoke push` also pushes it beside the image as an artifact referring to it
(trainstack.image.artifacts), read from the registry without pulling the image.
"""
from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

import docker

from trainrun.image_contract import SBOM_PATH
from trainstack import docker_client
from trainstack.errors import TrainstackError
from trainstack.image.dockerfile import RUNTIME_APT_PACKAGES
from trainstack.image.matrix import Flavor

SPEC_VERSION = "1.5"
# bom-refs of the project's own distributions, which no package index knows.
LOCAL_REF_PREFIX = "trainstack:"
# The property of a component whose licence write_sbom.py could not read: its value says why.
LICENSE_UNKNOWN = "trainstack:license-unknown"


def read_image_sbom(client: docker.DockerClient, image: str) -> dict[str, Any]:
    """The SBOM inside `image`; raises when it has none (an image built before SBOMs existed)."""
    return parse_sbom(image_sbom_text(client, image), f"{image}:{SBOM_PATH}")


def image_sbom_text(client: docker.DockerClient, image: str) -> str:
    """The SBOM file inside `image` as it is; raises when it has none."""
    status, text = docker_client.run_in_image(client, image, ["cat", SBOM_PATH])
    if status != 0:
        raise TrainstackError(f"{image} has no SBOM at {SBOM_PATH}; rebuild it with `invoke build`")
    return text


def parse_sbom(text: str, origin: str) -> dict[str, Any]:
    """A CycloneDX 1.5 JSON document, or the error naming `origin`."""
    try:
        sbom = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TrainstackError(f"{origin} is not JSON ({exc})") from None
    if not isinstance(sbom, dict) or sbom.get("bomFormat") != "CycloneDX" or sbom.get("specVersion") != SPEC_VERSION:
        raise TrainstackError(f"{origin} is not a CycloneDX {SPEC_VERSION} JSON document")
    if not isinstance(sbom.get("components"), list):
        raise TrainstackError(f"{origin} has no components")
    return sbom


def python_packages(sbom: dict[str, Any]) -> dict[str, str]:
    """Normalized distribution name -> version, for every Python component (PyPI's and the project's own)."""
    return {
        normalize(component["name"]): component.get("version", "")
        for component in sbom["components"]
        if str(component.get("purl", "")).startswith("pkg:pypi/")
        or str(component.get("bom-ref", "")).startswith(LOCAL_REF_PREFIX)
    }


def debian_packages(sbom: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Debian binary package -> its version, arch and distro (from the purl), and its source package."""
    packages = {}
    for component in sbom["components"]:
        purl = str(component.get("purl", ""))
        if purl.startswith("pkg:deb/"):
            properties = {item.get("name"): item.get("value") for item in component.get("properties", [])}
            qualifiers = dict(re.findall(r"[?&]([a-z]+)=([^&]+)", purl))
            packages[component["name"]] = {
                "version": component.get("version", ""),
                "arch": unquote(qualifiers.get("arch", "")),
                "distro": unquote(qualifiers.get("distro", "")),
                "source": properties.get("debian:source") or component["name"],
                "source_version": properties.get("debian:source-version") or component.get("version", ""),
            }
    return packages


def sbom_problems(flavor: Flavor, sbom_text: str | None, installed: dict[str, str]) -> list[str]:
    """How the image's SBOM misses what the image holds: every pinned distribution (`installed`, the constraints
    file) at its version, and the Debian packages the Dockerfile installs."""
    if sbom_text is None:
        return [f"the image has no SBOM at {SBOM_PATH}"]
    try:
        sbom = parse_sbom(sbom_text, SBOM_PATH)
    except TrainstackError as exc:
        return [str(exc)]
    problems = []
    listed = python_packages(sbom)
    for name, version in sorted(installed.items()):
        if listed.get(normalize(name)) != version:
            problems.append(f"the SBOM lists {name} as {listed.get(normalize(name), 'absent')}, "
                            f"the image holds {version}")
    debian = debian_packages(sbom)
    for package in [*RUNTIME_APT_PACKAGES, flavor.field("java", "apt_package")]:
        if package and package not in debian:
            problems.append(f"the SBOM lists no Debian package {package}, which the Dockerfile installs")
    return problems + license_problems(sbom)


def license_problems(sbom: dict[str, Any]) -> list[str]:
    """The components that give neither a licence (an SPDX expression, or licences each with an id or a name) nor,
    in the property trainstack:license-unknown, why it could not be read."""
    problems = []
    for component in sbom["components"]:
        licenses = component.get("licenses") or []
        named = [choice for choice in licenses
                 if isinstance(choice, dict) and (choice.get("expression") or (
                     isinstance(choice.get("license"), dict)
                     and (choice["license"].get("id") or choice["license"].get("name"))))]
        unknown = license_unknown(component)
        ref = component.get("bom-ref", component.get("name"))
        if licenses and len(named) != len(licenses):
            problems.append(f"the SBOM's component {ref} has a licence without an SPDX id, name or expression")
        elif not named and not unknown:
            problems.append(f"the SBOM's component {ref} gives no licence and no reason ({LICENSE_UNKNOWN})")
    return problems


def license_unknown(component: dict[str, Any]) -> str:
    """Why the component's licence could not be read (its trainstack:license-unknown property), or ''."""
    return next((str(item.get("value") or "") for item in component.get("properties", [])
                 if item.get("name") == LICENSE_UNKNOWN), "")


def normalize(name: str) -> str:
    """PEP 503 names, as pkg:pypi purls spell them."""
    return re.sub(r"[-_.]+", "-", name).lower()
