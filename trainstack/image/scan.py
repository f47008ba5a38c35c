"""Looks an SBOM's packages up in vulnerability databases, and says plainly which it could not look up.

Databases, in order: OSV's batch API (PyPI and Debian advisories) and then, for the Python packages OSV did
not answer for, PyPI's JSON API of each release (its `vulnerabilities`, from the PyPA advisory database; a
local version such as 2.13.0+cpu is looked up as its public version, 2.13.0). Debian packages are looked up by
their source package, which Debian's advisories name.

A package counts as scanned only when a database answered for it. The report never says "no known
vulnerabilities" of a package no database answered for; when none answered for any it says
"not scanned: no vulnerability database reachable (tried ...)". (pip-audit, by contrast, skips a release that
PyPI answers 404 for, and a mirror that serves no per-release JSON then gives "No known vulnerabilities
found" and exit 0.)
"""
from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import quote, unquote

from trainstack.image.sbom import LOCAL_REF_PREFIX, debian_packages

OSV_URL = "https://api.osv.dev"
PYPI_URL = "https://pypi.org"
TIMEOUT_S = 10.0
# OSV answers at most 1000 queries per batch; a batch gets longer to answer than one release's JSON.
OSV_BATCH = 500
OSV_BATCH_TIMEOUT_S = 30.0
PYPI_WORKERS = 8
# A partial scan names the packages it did not scan when they are this few.
LISTED_NOT_SCANNED = 20

# (url, JSON body to POST or None to GET, timeout) -> (HTTP status, decoded JSON or None); OSError: no answer.
Fetch = Callable[[str, "dict | None", float], "tuple[int, Any]"]


@dataclass(frozen=True)
class Package:
    """One lookup: a Python distribution, or a Debian source package standing for its binary packages."""
    ecosystem: str  # OSV's: "PyPI", "Debian:12"
    name: str
    version: str
    components: tuple[str, ...] = ()  # the SBOM's components it stands for, "openmpi-bin 4.1.4-3+b1"

    def __str__(self) -> str:
        shown = f"{self.ecosystem} {self.name} {self.version}"
        if self.components and self.components != (f"{self.name} {self.version}",):
            shown += f" ({', '.join(self.components)})"
        return shown


@dataclass
class ScanResult:
    packages: list[Package]
    # Vulnerability ids for each package a database answered for, and which database did.
    vulnerabilities: dict[Package, list[str]] = field(default_factory=dict)
    answered_by: dict[Package, str] = field(default_factory=dict)
    # What each database did: "URL: answered for N of M" or "URL: why not".
    tried: list[str] = field(default_factory=list)
    # Components no database can know (the project's own distributions).
    not_looked_up: list[str] = field(default_factory=list)

    @property
    def not_scanned(self) -> list[Package]:
        return [package for package in self.packages if package not in self.answered_by]

    @property
    def vulnerable(self) -> dict[Package, list[str]]:
        return {package: ids for package, ids in self.vulnerabilities.items() if ids}

    def not_scanned_line(self) -> str:
        """The "not scanned" sentence; empty when every package was scanned."""
        missing = self.not_scanned
        if not missing:
            return ""
        tried = "; ".join(self.tried) or "no database"
        if len(missing) == len(self.packages):
            return f"not scanned: no vulnerability database reachable (tried {tried})"
        counts: dict[str, int] = {}
        for package in missing:
            key = package.ecosystem or "no database for its type"
            counts[key] = counts.get(key, 0) + 1
        by_ecosystem = ", ".join(f"{ecosystem}: {count}" for ecosystem, count in sorted(counts.items()))
        return (f"not scanned: {len(missing)} of {len(self.packages)} packages ({by_ecosystem}); no vulnerability "
                f"database answered for them (tried {tried})")

    def report(self) -> str:
        if not self.packages and not self.not_looked_up:
            return "nothing to look up: the SBOM lists no packages"
        lines = []
        scanned = len(self.answered_by)
        if scanned:
            databases = {}
            for database in self.answered_by.values():
                databases[database] = databases.get(database, 0) + 1
            lines.append(f"scanned: {scanned} of {len(self.packages)} packages ("
                         + ", ".join(f"{name}: {count}" for name, count in sorted(databases.items())) + ")")
            vulnerable = self.vulnerable
            if vulnerable:
                lines.append(f"vulnerable: {len(vulnerable)} packages")
                lines += [f"  {package}: {', '.join(sorted(ids))}" for package, ids in
                          sorted(vulnerable.items(), key=lambda item: str(item[0]))]
            lines.append(f"no known vulnerabilities in the {'other ' if vulnerable else ''}"
                         f"{scanned - len(vulnerable)} scanned packages")
        if self.not_scanned:
            lines.append(self.not_scanned_line())
            if scanned and len(self.not_scanned) <= LISTED_NOT_SCANNED:
                lines += [f"  {package}" for package in self.not_scanned]
        if self.not_looked_up:
            lines.append(f"not looked up: {', '.join(self.not_looked_up)} (built from this repository)")
        return "\n".join(lines)


def lookups(sbom: dict[str, Any]) -> tuple[list[Package], list[str]]:
    """The packages to look up, and the components no database can know (the project's own distributions)."""
    packages: list[Package] = []
    not_looked_up = []
    for component in sbom["components"]:
        purl = str(component.get("purl", ""))
        shown = f"{component.get('name')} {component.get('version')}"
        if purl.startswith("pkg:pypi/"):
            name, _, version = purl[len("pkg:pypi/"):].partition("?")[0].partition("@")
            packages.append(Package("PyPI", unquote(name), unquote(version), (shown,)))
        elif purl.startswith("pkg:deb/"):
            continue  # below, grouped by source package
        elif str(component.get("bom-ref", "")).startswith(LOCAL_REF_PREFIX):
            not_looked_up.append(shown)
        elif purl:
            packages.append(Package("", purl, "", (shown,)))  # a type no database here covers: never scanned
    sources: dict[tuple[str, str, str], list[str]] = {}
    for name, package in debian_packages(sbom).items():
        # OSV's ecosystem for the purl's distro qualifier: debian-12 -> Debian:12.
        distro, _, release = package["distro"].partition("-")
        ecosystem = f"{distro.capitalize()}:{release}" if distro == "debian" and release else ""
        key = (ecosystem, package["source"], package["source_version"])
        sources.setdefault(key, []).append(f"{name} {package['version']}")
    packages += [Package(ecosystem, name, version, tuple(sorted(components)))
                 for (ecosystem, name, version), components in sorted(sources.items())]
    return packages, not_looked_up


def scan_sbom(sbom: dict[str, Any], osv_url: str = OSV_URL, pypi_url: str = PYPI_URL,
              fetch: Fetch | None = None) -> ScanResult:
    fetch = fetch or http_json
    packages, not_looked_up = lookups(sbom)
    result = ScanResult(packages, not_looked_up=not_looked_up)
    _record(result, "OSV", *osv_lookup([p for p in packages if p.ecosystem], osv_url.rstrip("/"), fetch))
    remaining = [package for package in result.not_scanned if package.ecosystem == "PyPI"]
    if remaining:
        _record(result, "PyPI JSON API", *pypi_lookup(remaining, pypi_url.rstrip("/"), fetch))
    return result


def _record(result: ScanResult, database: str, answers: dict[Package, list[str]], tried: str) -> None:
    result.tried.append(tried)
    for package, ids in answers.items():
        result.vulnerabilities[package] = ids
        result.answered_by[package] = database


def osv_lookup(packages: list[Package], osv_url: str, fetch: Fetch) -> tuple[dict[Package, list[str]], str]:
    """OSV's querybatch, OSV_BATCH packages a request; a package is answered when its batch was."""
    url = f"{osv_url}/v1/querybatch"
    answers: dict[Package, list[str]] = {}
    for start in range(0, len(packages), OSV_BATCH):
        chunk = packages[start:start + OSV_BATCH]
        body = {"queries": [_osv_query(package) for package in chunk]}
        try:
            status, answer = fetch(url, body, OSV_BATCH_TIMEOUT_S)
        except OSError as exc:
            return answers, f"{url}: {_reason(exc)}"
        results = answer.get("results") if isinstance(answer, dict) else None
        if status != 200 or not isinstance(results, list) or len(results) != len(chunk):
            return answers, f"{url}: HTTP {status}" + ("" if status != 200 else ", an answer without one result a query")
        for package, found in zip(chunk, results):
            ids = _osv_pages(package, found or {}, osv_url, fetch)
            if ids is not None:
                answers[package] = ids
    return answers, f"{url}: answered for {len(answers)} of {len(packages)} packages"


def _osv_query(package: Package) -> dict[str, Any]:
    return {"package": {"name": package.name, "ecosystem": package.ecosystem}, "version": package.version}


def _osv_pages(package: Package, found: dict[str, Any], osv_url: str, fetch: Fetch) -> list[str] | None:
    """The ids of a batch result, following its next_page_token; None when a page went unanswered."""
    ids = [vuln["id"] for vuln in found.get("vulns", [])]
    token = found.get("next_page_token")
    while token:
        try:
            status, page = fetch(f"{osv_url}/v1/query", {**_osv_query(package), "page_token": token}, TIMEOUT_S)
        except OSError:
            return None
        if status != 200 or not isinstance(page, dict):
            return None
        ids += [vuln["id"] for vuln in page.get("vulns", [])]
        token = page.get("next_page_token")
    return sorted(set(ids))


def pypi_lookup(packages: list[Package], pypi_url: str, fetch: Fetch) -> tuple[dict[Package, list[str]], str]:
    """PyPI's JSON of each release; the first request going unanswered stops the rest."""
    pattern = f"{pypi_url}/pypi/NAME/VERSION/json"

    def lookup(package: Package) -> tuple[int | str, list[str] | None]:
        url = f"{pypi_url}/pypi/{quote(package.name)}/{quote(package.version.split('+')[0])}/json"
        status, answer = fetch(url, None, TIMEOUT_S)
        vulns = answer.get("vulnerabilities") if isinstance(answer, dict) else None
        if status != 200 or not isinstance(vulns, list):
            return status, None
        return status, sorted({vuln["id"] for vuln in vulns if not vuln.get("withdrawn")})

    try:
        outcomes = [lookup(packages[0])]
    except OSError as exc:
        return {}, f"{pattern}: {_reason(exc)}"

    def guarded(package: Package) -> tuple[int | str, list[str] | None]:
        try:
            return lookup(package)
        except OSError as exc:
            return _reason(exc), None

    with ThreadPoolExecutor(PYPI_WORKERS) as pool:
        outcomes += list(pool.map(guarded, packages[1:]))
    answers = {package: ids for package, (_, ids) in zip(packages, outcomes) if ids is not None}
    failures: dict[str, int] = {}
    for status, ids in outcomes:
        if ids is None:
            reason = f"HTTP {status}" if isinstance(status, int) else status
            failures[reason] = failures.get(reason, 0) + 1
    if not answers and list(failures) == ["HTTP 404"]:
        return {}, f"{pattern}: HTTP 404 for all {len(packages)} releases (no per-release JSON served there)"
    unanswered = "".join(f"; {reason} for {count}" for reason, count in sorted(failures.items()))
    return answers, f"{pattern}: answered for {len(answers)} of {len(packages)} releases{unanswered}"


def http_json(url: str, body: dict | None = None, timeout: float = TIMEOUT_S) -> tuple[int, Any]:
    """GET (or POST `body` as JSON); the HTTP status and the decoded answer (None when not JSON).
    Proxies come from the environment; TRAINSTACK_CA_BUNDLE, when set, is the CA bundle."""
    request = urllib.request.Request(
        url, data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "trainstack-scan"})
    bundle = os.environ.get("TRAINSTACK_CA_BUNDLE")
    context = ssl.create_default_context(cafile=bundle) if bundle else None
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            status, data = response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, None
    try:
        return status, json.loads(data)
    except ValueError:
        return status, None


def _reason(exc: OSError) -> str:
    reason = getattr(exc, "reason", None) or exc
    return f"no answer ({reason})"
