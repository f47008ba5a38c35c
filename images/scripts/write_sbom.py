"""Runs inside the image at build time, beside write_manifest.py: a CycloneDX 1.5 SBOM of what is installed.

Its components are read from the image, never copied from the matrix: every distribution of the venv
(`pkg:pypi/...` purls) and every installed Debian package (`pkg:deb/debian/...?arch=...` purls, from dpkg's
status file, with the source package that Debian's advisories name). It has no timestamp and a serial number
derived from its contents, so the same contents always give the same file.

Every component gives its licences, read from what the image holds and never guessed: a distribution's
`License-Expression` metadata, else its `License` metadata when that is a name rather than a licence's text, else its
licence classifiers; a Debian package's `License:` fields in its machine-readable (DEP-5) /usr/share/doc/PKG/copyright.
Where none can be read, the component says why in its property `trainstack:license-unknown`.
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
# Each Debian package's copyright file is DOC_ROOT/PACKAGE/copyright (Debian policy 12.5); the image keeps them while it
# drops the rest of /usr/share/doc (images/Dockerfile.j2's dpkg path-include).
DOC_ROOT = Path("/usr/share/doc")
# The property of a component whose licence could not be read: its value says why.
LICENSE_UNKNOWN = "trainstack:license-unknown"
# The metadata fields a distribution's licence is read from (core metadata 2.4 and earlier).
LICENSE_FIELDS = ("License-Expression", "License", "Classifier", "License-File")
# A `License` field longer than this, or of several lines, or naming a copyright holder, is a licence's text (or a
# notice), not its name.
LICENSE_NAME_MAX = 100
# Licence classifiers that name exactly one SPDX licence; any other classifier gives its last part as the name.
CLASSIFIER_SPDX = {
    "License :: OSI Approved :: MIT License": "MIT",
    "License :: OSI Approved :: MIT No Attribution License (MIT-0)": "MIT-0",
    "License :: OSI Approved :: ISC License (ISCL)": "ISC",
    "License :: OSI Approved :: Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "License :: OSI Approved :: Boost Software License 1.0 (BSL-1.0)": "BSL-1.0",
    "License :: OSI Approved :: The Unlicense (Unlicense)": "Unlicense",
    "License :: OSI Approved :: zlib/libpng License": "Zlib",
    "License :: OSI Approved :: Historical Permission Notice and Disclaimer (HPND)": "HPND",
    "License :: OSI Approved :: Eclipse Public License 2.0 (EPL-2.0)": "EPL-2.0",
    "License :: OSI Approved :: Universal Permissive License (UPL)": "UPL-1.0",
    "License :: CC0 1.0 Universal (CC0 1.0) Public Domain Dedication": "CC0-1.0",
}
OS_LICENSE_REASON = "an operating system: its packages are components of their own, each with its licences"

try:  # packaging >= 24.2 holds SPDX's licence list; without it no name is taken for an SPDX id
    from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression
except ImportError:  # pragma: no cover - the image's venv and the dev venv have it
    canonicalize_license_expression = None


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


def debian_components(status_text: str, os_id: str, version_id: str,
                      copyrights: dict[str, str | None]) -> list[dict]:
    """One component per installed package ("install ok installed"; config-files leftovers are not installed), its
    licences from `copyrights` (package -> the text of its copyright file, None or absent where it has none)."""
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
        licenses, unknown = debian_licenses(name, copyrights.get(name))
        properties = [{"name": "debian:source", "value": source_name},
                      {"name": "debian:source-version", "value": source_version}]
        component = {"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl}
        components.append(with_licenses(component, properties, licenses, unknown))
    return components


def debian_licenses(package: str, copyright_text: str | None) -> tuple[list[dict], str | None]:
    """The licences a package's copyright file names (its DEP-5 `License:` short names, from the header and every
    `Files` paragraph, each once), or no licences and why."""
    path = f"{DOC_ROOT}/{package}/copyright"
    if copyright_text is None:
        return [], f"the image has no {path}"
    paragraphs = [{field.lower(): value for field, value in paragraph.items()}
                  for paragraph in parse_dpkg_status(copyright_text)]
    header = paragraphs[0] if paragraphs else {}
    # "Format:", or "Format-Specification:" in files written to DEP-5's drafts.
    if not re.search(r"copyright-format|dep5", header.get("format", "") or header.get("format-specification", "")):
        return [], f"{path} is not machine-readable (DEP-5): its licences are written there in prose"
    names = []
    for index, paragraph in enumerate(paragraphs):
        if index == 0 or "files" in paragraph:
            name = paragraph.get("license", "").split("\n")[0].strip()
            if name and name not in names:
                names.append(name)
    if not names:
        return [], f"{path} is machine-readable (DEP-5) but has no License field in its header or Files paragraphs"
    return [license_choice(name, expressions=False) for name in names], None


def read_copyrights(packages: list[str], doc_root: Path = DOC_ROOT) -> dict[str, str | None]:
    """Package -> the text of doc_root/PACKAGE/copyright (a link to another package's folder followed), or None."""
    found: dict[str, str | None] = {}
    for package in packages:
        path = doc_root / package / "copyright"
        found[package] = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
    return found


def python_components(distributions: list[dict]) -> list[dict]:
    """One component per distribution, given as `pip list --format json` entries (name, version), optionally with
    `installed_from` (the URL of its PEP 610 direct_url.json) and `metadata`, its LICENSE_FIELDS (Classifier and
    License-File as lists)."""
    components = []
    for dist in distributions:
        name, version, installed_from = dist["name"], dist["version"], dist.get("installed_from")
        properties = [{"name": "trainstack:installed-from", "value": installed_from}] if installed_from else []
        licenses, unknown = python_licenses(dist.get("metadata") or {})
        if installed_from and installed_from.startswith(LOCAL_SOURCE_PREFIX):
            component = {"type": "library", "bom-ref": f"trainstack:{normalize(name)}@{version}", "name": name,
                         "version": version}
        else:
            purl = f"pkg:pypi/{_enc(normalize(name))}@{_enc(version)}"
            component = {"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl}
        components.append(with_licenses(component, properties, licenses, unknown))
    return components


def python_licenses(metadata: dict) -> tuple[list[dict], str | None]:
    """A distribution's licences from its metadata: `License-Expression` (PEP 639), else `License` when it is a
    name, else its licence classifiers; or no licences and why."""
    expression = (metadata.get("License-Expression") or "").strip()
    if expression:
        return [{"expression": expression}], None
    license_field = (metadata.get("License") or "").strip()
    is_name = (license_field.upper() not in ("", "UNKNOWN", "NONE") and "\n" not in license_field
               and len(license_field) <= LICENSE_NAME_MAX and "copyright" not in license_field.lower())
    if is_name:
        return [license_choice(license_field)], None
    licenses = []
    for classifier in metadata.get("Classifier") or []:
        parts = [part.strip() for part in classifier.split("::")]
        if parts[0] != "License" or parts[1:] in ([], ["OSI Approved"]):
            continue
        spdx = CLASSIFIER_SPDX.get(" :: ".join(parts))
        choice = {"license": {"id": spdx}} if spdx else {"license": {"name": parts[-1]}}
        if choice not in licenses:
            licenses.append(choice)
    if licenses:
        return licenses, None
    if license_field.upper() in ("", "UNKNOWN", "NONE"):
        reason = "its metadata has no License-Expression, License or licence classifier"
    else:
        reason = ("its License metadata is a licence's text or a notice, not a name, and it has no License-Expression "
                  "or licence classifier")
    files = metadata.get("License-File") or []
    return [], reason + (f"; its licence files (License-File): {', '.join(files)}" if files else "")


def license_choice(name: str, expressions: bool = True) -> dict:
    """A CycloneDX licence choice: an SPDX id where `name` is one (SPDX ids match case-insensitively), an SPDX
    expression where `expressions` and `name` is a valid one of several ids, else the name as it is written."""
    if canonicalize_license_expression is not None:
        try:
            canonical = canonicalize_license_expression(name)
        except InvalidLicenseExpression:
            canonical = None
        if canonical and re.fullmatch(r"[A-Za-z0-9.-]+", canonical) and not canonical.startswith("LicenseRef-"):
            return {"license": {"id": canonical}}
        if canonical and expressions and " " in canonical:
            return {"expression": canonical}
    return {"license": {"name": name}}


def with_licenses(component: dict, properties: list[dict], licenses: list[dict], unknown: str | None) -> dict:
    """The component with its licences, or with the property that says why it has none, after its `properties`.
    CycloneDX allows one expression or a list of licences, never both: an expression comes alone."""
    assert len(licenses) == 1 or not any("expression" in choice for choice in licenses), licenses
    if unknown:
        properties = [*properties, {"name": LICENSE_UNKNOWN, "value": unknown}]
    return {**component, **({"licenses": licenses} if licenses else {}),
            **({"properties": properties} if properties else {})}


def build_sbom(flavor: str, os_info: dict[str, str], distributions: list[dict], dpkg_status: str,
               copyrights: dict[str, str | None]) -> dict:
    """The CycloneDX document; `os_info` holds id, version_id and version (e.g. debian, 12, 12.11); `copyrights`,
    each Debian package's copyright file (read_copyrights)."""
    operating_system = {"type": "operating-system", "bom-ref": f"os:{os_info['id']}@{os_info['version']}",
                        "name": os_info["id"], "version": os_info["version"],
                        "properties": [{"name": LICENSE_UNKNOWN, "value": OS_LICENSE_REASON}]}
    components = [operating_system, *python_components(distributions),
                  *debian_components(dpkg_status, os_info["id"], os_info["version_id"], copyrights)]
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


def venv_distributions(path: list[str] | None = None) -> list[dict]:
    """The distributions this Python (the venv's) sees, or those in the folders `path`, as `pip list --format json`
    gives them, plus where pip installed each from when it recorded that (direct_url.json) and the metadata fields
    their licences are read from."""
    found = []
    for dist in importlib.metadata.distributions(**({"path": path} if path is not None else {})):
        name = dist.metadata["Name"]
        if not name:
            continue
        entry = {"name": name, "version": dist.version}
        direct_url = dist.read_text("direct_url.json")
        if direct_url:
            entry["installed_from"] = json.loads(direct_url).get("url")
        metadata = {}
        for field in LICENSE_FIELDS:
            values = dist.metadata.get_all(field) or []
            if values:
                metadata[field] = values if field in ("Classifier", "License-File") else values[0]
        if metadata:
            entry["metadata"] = metadata
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
    parser.add_argument("--doc-root", type=Path, default=DOC_ROOT, help="where each package's PACKAGE/copyright is")
    args = parser.parse_args()
    status_text = args.dpkg_status.read_text()
    packages = sorted({paragraph["Package"] for paragraph in parse_dpkg_status(status_text) if "Package" in paragraph})
    sbom = build_sbom(args.flavor, os_info(), venv_distributions(), status_text,
                      read_copyrights(packages, args.doc_root))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(sbom, indent=1) + "\n")


if __name__ == "__main__":
    main()
