"""The vulnerability scan of an SBOM: what it reports when databases answer, answer in part, or not at all.
No test reaches the network: the databases are fakes, and the command-line runs go through a refused proxy."""
import os
import subprocess
import sys
import urllib.error
from pathlib import Path

import pytest

from trainstack.matrix import REPO_ROOT
from trainstack.sbom import parse_sbom
from trainstack.scan import Package, lookups, scan_sbom

GOLDEN_SBOM = Path(__file__).parent / "golden" / "sbom.cdx.json"
SBOM = parse_sbom(GOLDEN_SBOM.read_text(), str(GOLDEN_SBOM))
OSV_BATCH = "https://api.osv.dev/v1/querybatch"
OPENMPI = Package("Debian:12", "openmpi", "4.1.4-3",
                  ("libopenmpi3 4.1.4-3+b1", "openmpi-bin 4.1.4-3+b1", "openmpi-common 4.1.4-3"))


class Databases:
    """A fake `fetch`: OSV and PyPI answering from dicts, or not answering at all."""

    def __init__(self, osv: dict | None = None, pypi: dict | None = None, osv_pages: dict | None = None):
        self.osv, self.pypi, self.osv_pages = osv, pypi, osv_pages or {}
        self.requests: list[tuple[str, dict | None]] = []

    def __call__(self, url: str, body: dict | None, timeout: float):
        self.requests.append((url, body))
        if url.startswith("https://api.osv.dev/"):
            if self.osv is None:
                raise urllib.error.URLError(OSError(-2, "Name or service not known"))
            if url.endswith("/v1/query"):
                return 200, self.osv_pages[body["page_token"]]
            return 200, {"results": [self.osv.get((q["package"]["ecosystem"], q["package"]["name"], q["version"]), {})
                                     for q in body["queries"]]}
        if self.pypi is None:
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
        name, version = url.split("/pypi/")[1].split("/")[:2]
        return (200, {"vulnerabilities": self.pypi[(name, version)]}) if (name, version) in self.pypi else (404, None)


def test_lookups_are_python_distributions_and_debian_source_packages():
    packages, not_looked_up = lookups(SBOM)
    assert Package("PyPI", "torch", "2.13.0+cpu", ("torch 2.13.0+cpu",)) in packages
    assert Package("PyPI", "tf-keras", "2.21.0", ("tf_keras 2.21.0",)) in packages
    assert OPENMPI in packages
    assert Package("Debian:12", "shadow", "1:4.13+dfsg1-1+deb12u1", ("login 1:4.13+dfsg1-1+deb12u1",)) in packages
    assert not_looked_up == ["pooltemplates 0.1.0", "trainrun 0.1.0"]
    assert not any(package.name in ("trainrun", "pooltemplates", "debian") for package in packages)


def test_no_database_reachable_is_not_scanned():
    databases = Databases()
    result = scan_sbom(SBOM, fetch=databases)
    assert result.answered_by == {}
    assert result.not_scanned == result.packages
    report = result.report()
    assert report.startswith(
        "not scanned: no vulnerability database reachable (tried https://api.osv.dev/v1/querybatch: no answer ("
    ), report
    assert "https://pypi.org/pypi/NAME/VERSION/json: no answer (" in report
    assert "no known vulnerabilities" not in report.lower()
    # PyPI's first request going unanswered stops the rest.
    assert len([url for url, _ in databases.requests if url.startswith("https://pypi.org/")]) == 1


def test_pypi_answering_404_for_every_release_is_not_scanned():
    result = scan_sbom(SBOM, fetch=Databases(pypi={}))
    assert result.answered_by == {}
    assert "https://pypi.org/pypi/NAME/VERSION/json: HTTP 404 for all 15 releases" in result.report()
    assert "no known vulnerabilities" not in result.report().lower()


def test_osv_answering_reports_what_it_found():
    osv = {
        ("PyPI", "torch", "2.13.0+cpu"): {"vulns": [{"id": "GHSA-aaaa-bbbb-cccc", "modified": "2026-01-01T00:00:00Z"}]},
        ("Debian:12", "openmpi", "4.1.4-3"): {"vulns": [{"id": "DSA-0000-1"}], "next_page_token": "more"},
    }
    databases = Databases(osv=osv, osv_pages={"more": {"vulns": [{"id": "DLA-0000-1"}]}})
    result = scan_sbom(SBOM, fetch=databases)
    assert result.not_scanned == []
    assert result.vulnerable == {
        Package("PyPI", "torch", "2.13.0+cpu", ("torch 2.13.0+cpu",)): ["GHSA-aaaa-bbbb-cccc"],
        OPENMPI: ["DLA-0000-1", "DSA-0000-1"],
    }
    report = result.report().splitlines()
    assert report[0] == f"scanned: {len(result.packages)} of {len(result.packages)} packages (OSV: {len(result.packages)})"
    assert report[1:4] == [
        "vulnerable: 2 packages",
        "  Debian:12 openmpi 4.1.4-3 (libopenmpi3 4.1.4-3+b1, openmpi-bin 4.1.4-3+b1, openmpi-common 4.1.4-3): "
        "DLA-0000-1, DSA-0000-1",
        "  PyPI torch 2.13.0+cpu: GHSA-aaaa-bbbb-cccc",
    ]
    assert report[4] == f"no known vulnerabilities in the other {len(result.packages) - 2} scanned packages"
    batch = next(body for url, body in databases.requests if url == OSV_BATCH)
    assert {"package": {"name": "openmpi", "ecosystem": "Debian:12"}, "version": "4.1.4-3"} in batch["queries"]
    assert not any(url.startswith("https://pypi.org/") for url, _ in databases.requests)


def test_only_the_python_packages_scanned_leaves_the_debian_ones_not_scanned():
    pypi = {(name, version): [] for name, version in [
        ("horovod", "0.28.1"), ("ipykernel", "7.4.0"), ("ipywidgets", "8.1.9"), ("jupyterlab", "4.6.6"),
        ("nbclient", "0.11.0"), ("nbconvert", "7.17.2"), ("markdown", "3.10"), ("markupsafe", "3.0.3"), ("numpy", "2.3.5"), ("pip", "23.0.1"),
        ("pyspark", "4.3.0"), ("tensorflow-cpu", "2.21.0"), ("tf-keras", "2.21.0"), ("zope-interface", "8.0.1")]}
    pypi[("torch", "2.13.0")] = [{"id": "PYSEC-2026-1"}, {"id": "PYSEC-2025-9", "withdrawn": "2025-12-01"}]
    result = scan_sbom(SBOM, fetch=Databases(pypi=pypi))
    assert {package.ecosystem for package in result.answered_by} == {"PyPI"}
    assert {package.ecosystem for package in result.not_scanned} == {"Debian:12"}
    assert result.vulnerable == {Package("PyPI", "torch", "2.13.0+cpu", ("torch 2.13.0+cpu",)): ["PYSEC-2026-1"]}
    report = result.report()
    debian = len(result.not_scanned)
    assert f"scanned: 15 of {15 + debian} packages (PyPI JSON API: 15)" in report
    assert (f"not scanned: {debian} of {15 + debian} packages (Debian:12: {debian}); no vulnerability database "
            "answered for them (tried https://api.osv.dev/v1/querybatch: no answer (") in report
    assert "no known vulnerabilities in the other 14 scanned packages" in report


def invoke_scan(*args: str) -> subprocess.CompletedProcess:
    """`invoke scan` with every HTTP(S) request sent to a proxy that refuses connections."""
    env = {**os.environ, "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
           "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9", "NO_PROXY": "", "no_proxy": "",
           "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    return subprocess.run([sys.executable, "-m", "invoke", "scan", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, env=env)


def test_scan_task_required_but_not_scanned_fails():
    result = invoke_scan("--sbom", str(GOLDEN_SBOM), "--require")
    assert result.returncode == 2, result.stderr
    assert ("error: --require: not scanned: no vulnerability database reachable (tried "
            "https://api.osv.dev/v1/querybatch: no answer (") in result.stderr
    assert result.stdout.startswith("not scanned: no vulnerability database reachable")
    assert "no known vulnerabilities" not in (result.stdout + result.stderr).lower()


def test_scan_task_not_required_says_not_scanned_and_passes():
    result = invoke_scan("--sbom", str(GOLDEN_SBOM))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("not scanned: no vulnerability database reachable")


@pytest.mark.parametrize(("args", "message"), [
    (["--sbom", "/nonexistent/sbom.json"], "error: --sbom = '/nonexistent/sbom.json': is not a file"),
    (["--sbom", str(Path(__file__))], "is not JSON"),
    (["--sbom", str(GOLDEN_SBOM), "--osv-url", "http://osv.example.org"],
     "error: --osv-url = 'http://osv.example.org': is not an https URL"),
    (["--flavor", "cpu"], "error: docker: the daemon is not reachable"),
])
def test_scan_task_bad_input(args, message):
    result = invoke_scan(*args)
    assert result.returncode == 2
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr

