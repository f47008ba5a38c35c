"""The SBOM: made in the image by images/scripts/write_sbom.py from fixture inputs (dpkg's status file and a
`pip list --format json` listing), and checked on the host against what the image holds."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from file_modules import load_file_module

from trainstack.errors import TrainstackError
from trainstack.image.manifest import parse_constraints
from trainstack.image.matrix import REPO_ROOT, load_matrix
from trainstack.image.sbom import debian_packages, parse_sbom, python_packages, sbom_problems

FIXTURES = Path(__file__).parent / "fixtures"
DPKG_STATUS = (FIXTURES / "dpkg-status").read_text()
PIP_LIST = json.loads((FIXTURES / "pip-list.json").read_text())
OS_INFO = {"id": "debian", "version_id": "12", "version": "12.11"}
WRITE_SBOM = REPO_ROOT / "images" / "scripts" / "write_sbom.py"


@pytest.fixture(scope="module")
def write_sbom():
    return load_file_module(WRITE_SBOM)


@pytest.fixture(scope="module")
def sbom(write_sbom):
    return write_sbom.build_sbom("cpu", OS_INFO, PIP_LIST, DPKG_STATUS)


def components(sbom: dict) -> dict[str, dict]:
    return {component["name"]: component for component in sbom["components"]}


def properties(component: dict) -> dict[str, str]:
    return {item["name"]: item["value"] for item in component.get("properties", [])}


def test_sbom_matches_golden(sbom, golden):
    golden("sbom.cdx.json", json.dumps(sbom, indent=1) + "\n")


def test_sbom_is_cyclonedx_1_5_describing_the_image(sbom):
    assert (sbom["bomFormat"], sbom["specVersion"], sbom["version"]) == ("CycloneDX", "1.5", 1)
    assert sbom["serialNumber"].startswith("urn:uuid:")
    assert sbom["metadata"]["component"] == {"type": "container", "bom-ref": "trainstack:cpu", "name": "trainstack",
                                             "version": "cpu"}
    assert sbom["components"][0] == {"type": "operating-system", "bom-ref": "os:debian@12.11", "name": "debian",
                                     "version": "12.11"}
    refs = [component["bom-ref"] for component in sbom["components"]]
    assert len(refs) == len(set(refs))


@pytest.mark.parametrize(("name", "purl"), [
    ("torch", "pkg:pypi/torch@2.13.0%2Bcpu"),
    ("tf_keras", "pkg:pypi/tf-keras@2.21.0"),
    ("zope.interface", "pkg:pypi/zope-interface@8.0.1"),
    ("Markdown", "pkg:pypi/markdown@3.10"),
    ("horovod", "pkg:pypi/horovod@0.28.1"),
])
def test_python_distributions_get_pypi_purls(sbom, name, purl):
    assert components(sbom)[name]["purl"] == purl
    assert components(sbom)[name]["bom-ref"] == purl


def test_horovod_records_that_it_was_built_here(sbom):
    assert properties(components(sbom)["horovod"]) == {
        "trainstack:installed-from": "file:///tmp/build/horovod/horovod-0.28.1"}


def test_the_projects_own_distributions_get_no_pypi_purl(sbom):
    for name in ("trainrun", "pooltemplates"):
        component = components(sbom)[name]
        assert "purl" not in component
        assert component["bom-ref"] == f"trainstack:{name}@0.1.0"


@pytest.mark.parametrize(("name", "purl", "source", "source_version"), [
    ("openmpi-bin", "pkg:deb/debian/openmpi-bin@4.1.4-3%2Bb1?arch=amd64&distro=debian-12", "openmpi", "4.1.4-3"),
    ("libopenmpi3", "pkg:deb/debian/libopenmpi3@4.1.4-3%2Bb1?arch=amd64&distro=debian-12", "openmpi", "4.1.4-3"),
    ("login", "pkg:deb/debian/login@1%3A4.13%2Bdfsg1-1%2Bdeb12u1?arch=amd64&distro=debian-12", "shadow",
     "1:4.13+dfsg1-1+deb12u1"),
    ("libstdc++6", "pkg:deb/debian/libstdc%2B%2B6@12.2.0-14%2Bdeb12u1?arch=amd64&distro=debian-12", "gcc-12",
     "12.2.0-14+deb12u1"),
    ("tar", "pkg:deb/debian/tar@1.34%2Bdfsg-1.2%2Bdeb12u1?arch=amd64&distro=debian-12", "tar", "1.34+dfsg-1.2+deb12u1"),
    ("ca-certificates", "pkg:deb/debian/ca-certificates@20230311%2Bdeb12u1?arch=all&distro=debian-12",
     "ca-certificates", "20230311+deb12u1"),
])
def test_debian_packages_get_deb_purls_and_their_source(sbom, name, purl, source, source_version):
    component = components(sbom)[name]
    assert component["purl"] == purl
    assert properties(component) == {"debian:source": source, "debian:source-version": source_version}


def test_only_installed_debian_packages_are_listed(sbom):
    names = {c["name"] for c in sbom["components"] if c.get("purl", "").startswith("pkg:deb/")}
    assert "libfoo-removed1" not in names
    assert len(names) == DPKG_STATUS.count("Status: install ok installed")


def test_dpkg_status_continuation_lines_stay_in_their_field(write_sbom):
    paragraph = write_sbom.parse_dpkg_status("Package: a\nDescription: short\n long\n .\n more\n\n\nPackage: b\n")
    assert paragraph == [{"Package": "a", "Description": "short\nlong\n.\nmore"}, {"Package": "b"}]


def test_serial_number_follows_the_contents(write_sbom, sbom):
    assert write_sbom.build_sbom("cpu", OS_INFO, PIP_LIST, DPKG_STATUS)["serialNumber"] == sbom["serialNumber"]
    changed = [*PIP_LIST[:-1], {"name": "zope.interface", "version": "8.0.2"}]
    assert write_sbom.build_sbom("cpu", OS_INFO, changed, DPKG_STATUS)["serialNumber"] != sbom["serialNumber"]


def test_venv_distributions_reads_this_python(write_sbom):
    found = {entry["name"].lower(): entry for entry in write_sbom.venv_distributions()}
    assert found["pytest"]["version"] == __import__("pytest").__version__


def test_script_writes_the_file(tmp_path):
    out = tmp_path / "etc" / "sbom.cdx.json"
    subprocess.run([sys.executable, str(WRITE_SBOM), "--flavor", "cpu", "--out", str(out),
                    "--dpkg-status", str(FIXTURES / "dpkg-status")], check=True, timeout=60)
    written = parse_sbom(out.read_text(), str(out))
    assert "openmpi-bin" in debian_packages(written)
    assert "pytest" in python_packages(written)


# The host's side: the SBOM read back and held to what the image holds.

@pytest.fixture(scope="module")
def cpu():
    return load_matrix().flavor("cpu")


def constraints_of(pip_list: list[dict]) -> dict[str, str]:
    return parse_constraints("".join(f"{entry['name']}=={entry['version']}\n" for entry in pip_list
                                     if entry["name"] != "pip"))


def test_reading_the_sbom_back(sbom):
    assert python_packages(sbom)["tf-keras"] == "2.21.0"
    assert python_packages(sbom)["trainrun"] == "0.1.0"
    assert debian_packages(sbom)["libopenmpi3"] == {
        "version": "4.1.4-3+b1", "arch": "amd64", "distro": "debian-12", "source": "openmpi",
        "source_version": "4.1.4-3"}


def test_an_sbom_listing_what_is_installed_passes(cpu, sbom):
    assert sbom_problems(cpu, json.dumps(sbom), constraints_of(PIP_LIST)) == []


def test_an_image_without_an_sbom_fails(cpu):
    assert sbom_problems(cpu, None, {}) == ["the image has no SBOM at /etc/trainstack/sbom.cdx.json"]


def test_an_sbom_missing_or_misstating_a_distribution_fails(cpu, sbom):
    installed = {**constraints_of(PIP_LIST), "torch": "2.12.0+cpu", "pyarrow": "26.0.1"}
    assert sbom_problems(cpu, json.dumps(sbom), installed) == [
        "the SBOM lists pyarrow as absent, the image holds 26.0.1",
        "the SBOM lists torch as 2.13.0+cpu, the image holds 2.12.0+cpu",
    ]


def test_an_sbom_without_the_dockerfiles_debian_packages_fails(cpu, sbom):
    trimmed = {**sbom, "components": [c for c in sbom["components"] if c["name"] not in ("tini", "openmpi-bin")]}
    assert sbom_problems(cpu, json.dumps(trimmed), constraints_of(PIP_LIST)) == [
        "the SBOM lists no Debian package openmpi-bin, which the Dockerfile installs",
        "the SBOM lists no Debian package tini, which the Dockerfile installs",
    ]


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "is not JSON"),
    ('{"bomFormat": "CycloneDX", "specVersion": "1.4", "components": []}', "is not a CycloneDX 1.5 JSON document"),
    ('{"bomFormat": "SPDX"}', "is not a CycloneDX 1.5 JSON document"),
])
def test_a_document_that_is_no_cyclonedx_1_5_is_refused(cpu, text, message):
    with pytest.raises(TrainstackError, match=message):
        parse_sbom(text, "x.json")
    assert message in sbom_problems(cpu, text, {})[0]
