"""Runs inside the image at build time, beside write_manifest.py: a CycloneDX 1.5 SBOM of what is installed.

Its components are read from the image, never copied from the matrix: every distribution of the venv
(`pkg:pypi/...` purls) and every installed Debian package (`pkg:deb/debian/...?arch=...` purls, from dpkg's
status file, with the source package that Debian's advisories name). It has no timestamp and a serial number
derived from its contents, so the same contents always give the same file.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import uuid
from pathlib import Path
from urllib.parse import quote

SPEC_VERSION = "1.5"
DPKG_STATUS = Path("/var/lib/dpkg/status")
# Distributions pip installed from these folders are this project's own (trainrun, pooltemplates): no PyPI purl,
# since a PyPI project of the same name would be another project.
LOCAL_SOURCE_PREFIX = "file:///opt/trainstack/src/"
# uuid5 namespace of the serial numbers (any fixed UUID; changing it changes every serial number).
SERIAL_NAMESPACE = uuid.UUID("5d3c1f0e-3b8e-4c55-9a63-1f0b6a0c2e71")
TOOL = {"type": "application", "name": "trainstack write_sbom.py", "version": "1"}


def parse_dpkg_status(text: str) -> list[dict[str, str]]:
    """dpkg's status file as one dict per paragraph (continuation lines joined to their field)."""
    paragraphs = []
    fields: dict[str, str] = {}
    field = None
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if fields:
                paragraphs.append(fields)
            fields, field = {}, None
        elif line[0] in " \t" and field:
            fields[field] += "\n" + line[1:]
        else:
            field, _, value = line.partition(":")
            fields[field] = value.strip()
    return paragraphs


def debian_components(status_text: str, os_id: str, version_id: str) -> list[dict]:
    """One component per installed package ("install ok installed"; config-files leftovers are not installed)."""
    components = []
    for package in parse_dpkg_status(status_text):
        if package.get("Status", "").split()[-1:] != ["installed"] or "Package" not in package:
            continue
        name, version, arch = package["Package"], package.get("Version", ""), package.get("Architecture", "")
        # "Source: openmpi (4.1.4-3)" for a binNMU (4.1.4-3+b1); no Source field: the source is named as the package.
        source = re.fullmatch(r"(\S+)(?:\s+\((\S+)\))?", package.get("Source", "") or name)
        source_name, source_version = (source.group(1), source.group(2) or version) if source else (name, version)
        qualifiers = {"arch": arch, "distro": f"{os_id}-{version_id}"}
        purl = f"pkg:deb/{_enc(os_id)}/{_enc(name)}@{_enc(version)}?" + "&".join(
            f"{key}={_enc(value)}" for key, value in sorted(qualifiers.items()) if value)
        components.append({
            "type": "library",
            "bom-ref": purl,
            "name": name,
            "version": version,
            "purl": purl,
            "properties": [
                {"name": "debian:source", "value": source_name},
                {"name": "debian:source-version", "value": source_version},
            ],
        })
    return components


def python_components(distributions: list[dict]) -> list[dict]:
    """One component per distribution, given as `pip list --format json` entries (name, version), optionally with
    `installed_from` (the URL of its PEP 610 direct_url.json)."""
    components = []
    for dist in distributions:
        name, version, installed_from = dist["name"], dist["version"], dist.get("installed_from")
        properties = [{"name": "trainstack:installed-from", "value": installed_from}] if installed_from else []
        if installed_from and installed_from.startswith(LOCAL_SOURCE_PREFIX):
            components.append({"type": "library", "bom-ref": f"trainstack:{normalize(name)}@{version}", "name": name,
                               "version": version, "properties": properties})
            continue
        purl = f"pkg:pypi/{_enc(normalize(name))}@{_enc(version)}"
        component = {"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl}
        components.append({**component, "properties": properties} if properties else component)
    return components


def build_sbom(flavor: str, os_info: dict[str, str], distributions: list[dict], dpkg_status: str) -> dict:
    """The CycloneDX document; `os_info` holds id, version_id and version (e.g. debian, 12, 12.11)."""
    operating_system = {"type": "operating-system", "bom-ref": f"os:{os_info['id']}@{os_info['version']}",
                        "name": os_info["id"], "version": os_info["version"]}
    components = [operating_system, *python_components(distributions),
                  *debian_components(dpkg_status, os_info["id"], os_info["version_id"])]
    unique = {component["bom-ref"]: component for component in components}
    components = sorted(unique.values(), key=lambda component: (component["type"] != "operating-system",
                                                                 component["bom-ref"]))
    serial = uuid.uuid5(SERIAL_NAMESPACE, json.dumps([flavor, components], sort_keys=True))
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": f"urn:uuid:{serial}",
        "version": 1,
        "metadata": {
            "tools": {"components": [TOOL]},
            "component": {"type": "container", "bom-ref": f"trainstack:{flavor}", "name": "trainstack",
                          "version": flavor},
            "properties": [{"name": "trainstack:flavor", "value": flavor}],
        },
        "components": components,
    }


def venv_distributions() -> list[dict]:
    """The distributions this Python (the venv's) sees, as `pip list --format json` gives them, plus where pip
    installed each from when it recorded that (direct_url.json)."""
    found = []
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        entry = {"name": name, "version": dist.version}
        direct_url = dist.read_text("direct_url.json")
        if direct_url:
            entry["installed_from"] = json.loads(direct_url).get("url")
        found.append(entry)
    return sorted(found, key=lambda entry: normalize(entry["name"]))


def os_info(root: Path = Path("/")) -> dict[str, str]:
    fields = {}
    for line in (root / "etc/os-release").read_text().splitlines():
        key, _, value = line.partition("=")
        fields[key] = value.strip('"')
    debian_version = root / "etc/debian_version"
    version = debian_version.read_text().strip() if debian_version.exists() else fields.get("VERSION_ID", "")
    return {"id": fields.get("ID", ""), "version_id": fields.get("VERSION_ID", ""), "version": version}


def normalize(name: str) -> str:
    """PEP 503 names, as pkg:pypi purls spell them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _enc(text: str) -> str:
    """Percent-encoding of a purl part: + and : (Debian epochs) encoded, ~ and . kept."""
    return quote(text, safe=".-_~")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--flavor", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dpkg-status", type=Path, default=DPKG_STATUS)
    args = parser.parse_args()
    sbom = build_sbom(args.flavor, os_info(), venv_distributions(), args.dpkg_status.read_text())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(sbom, indent=1) + "\n")


if __name__ == "__main__":
    main()
