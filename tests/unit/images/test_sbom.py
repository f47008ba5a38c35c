"""The SBOM: made in the image by images/scripts/write_sbom.py from fixture inputs (dpkg's status file, a
`pip list --format json` listing with each distribution's licence metadata, and Debian copyright files abridged from
bookworm's), and checked on the host against what the image holds."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from file_modules import load_file_module

from trainstack.errors import TrainstackError
from trainstack.image.manifest import parse_constraints
from trainstack.image.matrix import REPO_ROOT, load_matrix
from trainstack.image.sbom import (
    LICENSE_UNKNOWN,
    debian_packages,
    license_problems,
    license_unknown,
    parse_sbom,
    python_packages,
    sbom_problems,
)

FIXTURES = Path(__file__).parent / "fixtures"
DPKG_STATUS = (FIXTURES / "dpkg-status").read_text()
PIP_LIST = json.loads((FIXTURES / "pip-list.json").read_text())
OS_INFO = {"id": "debian", "version_id": "12", "version": "12.11"}
WRITE_SBOM = REPO_ROOT / "images" / "scripts" / "write_sbom.py"
# /usr/share/doc of the fixture: every package of dpkg-status but procps has its copyright file.
DOC_ROOT = FIXTURES / "doc"


@pytest.fixture(scope="module")
def write_sbom():
    return load_file_module(WRITE_SBOM)


@pytest.fixture(scope="module")
def copyrights(write_sbom):
    return write_sbom.read_copyrights(sorted({p["Package"] for p in write_sbom.parse_dpkg_status(DPKG_STATUS)}),
                                      DOC_ROOT)


@pytest.fixture(scope="module")
def sbom(write_sbom, copyrights):
    return write_sbom.build_sbom("cpu", OS_INFO, PIP_LIST, DPKG_STATUS, copyrights)


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
    assert sbom["components"][0] == {
        "type": "operating-system", "bom-ref": "os:debian@12.11", "name": "debian", "version": "12.11",
        "properties": [{"name": LICENSE_UNKNOWN,
                        "value": "an operating system: its packages are components of their own, each with its "
                                 "licences"}]}
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
    assert components(sbom)["horovod"]["licenses"] == [{"license": {"name": "Apache 2.0"}}]
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
    assert {key: value for key, value in properties(component).items() if key.startswith("debian:")} == {
        "debian:source": source, "debian:source-version": source_version}


def test_only_installed_debian_packages_are_listed(sbom):
    names = {c["name"] for c in sbom["components"] if c.get("purl", "").startswith("pkg:deb/")}
    assert "libfoo-removed1" not in names
    assert len(names) == DPKG_STATUS.count("Status: install ok installed")


def test_dpkg_status_continuation_lines_stay_in_their_field(write_sbom):
    paragraph = write_sbom.parse_dpkg_status("Package: a\nDescription: short\n long\n .\n more\n\n\nPackage: b\n")
    assert paragraph == [{"Package": "a", "Description": "short\nlong\n.\nmore"}, {"Package": "b"}]


def test_serial_number_follows_the_contents(write_sbom, sbom, copyrights):
    def serial(distributions, copyrights):
        return write_sbom.build_sbom("cpu", OS_INFO, distributions, DPKG_STATUS, copyrights)["serialNumber"]

    assert serial(PIP_LIST, copyrights) == sbom["serialNumber"]
    changed = [*PIP_LIST[:-1], {**PIP_LIST[-1], "version": "8.0.2"}]
    assert serial(changed, copyrights) != sbom["serialNumber"]
    assert serial(PIP_LIST, {**copyrights, "tini": None}) != sbom["serialNumber"]


def test_venv_distributions_reads_this_python(write_sbom):
    found = {entry["name"].lower(): entry for entry in write_sbom.venv_distributions()}
    assert found["pytest"]["version"] == __import__("pytest").__version__


def test_script_writes_the_file(tmp_path):
    out = tmp_path / "etc" / "sbom.cdx.json"
    subprocess.run([sys.executable, str(WRITE_SBOM), "--flavor", "cpu", "--out", str(out),
                    "--dpkg-status", str(FIXTURES / "dpkg-status"), "--doc-root", str(DOC_ROOT)],
                   check=True, timeout=60)
    written = parse_sbom(out.read_text(), str(out))
    assert "openmpi-bin" in debian_packages(written)
    assert "pytest" in python_packages(written)
    assert components(written)["tini"]["licenses"] == [{"license": {"name": "Expat"}}]
    assert components(written)["pytest"]["licenses"]  # pytest's own metadata: MIT
    assert license_problems(written) == []


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


# Licences: every component gives its licences, read from what the image holds, or why it could not.

@pytest.mark.parametrize(("name", "licenses"), [
    ("torch", [{"expression": "Apache-2.0 AND Apache-2.0 WITH LLVM-exception AND BSD-2-Clause AND BSD-3-Clause AND "
                              "BSL-1.0 AND MIT"}]),
    ("trainrun", [{"expression": "Apache-2.0"}]),
    ("pyspark", [{"license": {"id": "Apache-2.0"}}]),
    ("pip", [{"license": {"id": "MIT"}}]),
    ("tensorflow-cpu", [{"license": {"name": "Apache 2.0"}}]),
    ("nbclient", [{"license": {"name": "BSD License"}}]),
    ("zope.interface", [{"license": {"id": "ZPL-2.1"}}]),
    ("tar", [{"license": {"name": "GPL-3+"}}, {"license": {"name": "GPL-3+ with Bison exception"}}]),
    ("login", [{"license": {"id": "BSD-3-Clause"}}, {"license": {"name": "GPL-1"}}]),
    ("ca-certificates", [{"license": {"name": "GPL-2+"}}, {"license": {"id": "MPL-2.0"}}]),
    ("openjdk-17-jre-headless", [{"license": {"name": "GPL with Classpath exception"}}, {"license": {"id": "MIT"}}]),
    ("openssh-server", [{"license": {"name": "OpenSSH"}}, {"license": {"name": "public-domain"}}]),
])
def test_licences_come_from_the_metadata_and_the_copyright_files(sbom, name, licenses):
    component = components(sbom)[name]
    assert component["licenses"] == licenses
    assert LICENSE_UNKNOWN not in properties(component)


@pytest.mark.parametrize(("name", "reason"), [
    ("nbconvert", "its License metadata is a licence's text or a notice, not a name, and it has no License-Expression "
                  "or licence classifier; its licence files (License-File): LICENSE"),
    ("openmpi-bin", "/usr/share/doc/openmpi-bin/copyright is not machine-readable (DEP-5): its licences are written "
                    "there in prose"),
    ("libstdc++6", "/usr/share/doc/libstdc++6/copyright is not machine-readable (DEP-5): its licences are written "
                   "there in prose"),
    ("procps", "the image has no /usr/share/doc/procps/copyright"),
])
def test_a_licence_that_cannot_be_read_is_said_so_not_guessed(sbom, name, reason):
    component = components(sbom)[name]
    assert "licenses" not in component
    assert license_unknown(component) == properties(component)[LICENSE_UNKNOWN] == reason


def test_every_component_gives_a_licence_or_why_not(sbom):
    assert license_problems(sbom) == []
    assert all(c.get("licenses") or license_unknown(c) for c in sbom["components"])


@pytest.mark.parametrize(("metadata", "licenses", "reason"), [
    ({"License-Expression": "MIT OR Apache-2.0", "License": "MIT",
      "Classifier": ["License :: OSI Approved :: BSD License"]}, [{"expression": "MIT OR Apache-2.0"}], None),
    ({"License": "mit"}, [{"license": {"id": "MIT"}}], None),
    ({"License": "MIT or Apache-2.0"}, [{"expression": "MIT OR Apache-2.0"}], None),
    ({"License": "Apache Software License 2.0"}, [{"license": {"name": "Apache Software License 2.0"}}], None),
    ({"License": "UNKNOWN", "Classifier": ["License :: OSI Approved :: MIT License",
                                           "License :: OSI Approved :: Apache Software License",
                                           "License :: OSI Approved", "Programming Language :: Python"]},
     [{"license": {"id": "MIT"}}, {"license": {"name": "Apache Software License"}}], None),
    ({"License": "Copyright (c) 2024 Someone", "Classifier": ["License :: OSI Approved :: BSD License"]},
     [{"license": {"name": "BSD License"}}], None),
    ({}, [], "its metadata has no License-Expression, License or licence classifier"),
    ({"License": "UNKNOWN", "Classifier": ["License :: OSI Approved"], "License-File": ["COPYING"]}, [],
     "its metadata has no License-Expression, License or licence classifier; its licence files (License-File): "
     "COPYING"),
    ({"License": "Copyright 2020 Someone. All rights reserved."}, [],
     "its License metadata is a licence's text or a notice, not a name, and it has no License-Expression or licence "
     "classifier"),
])
def test_python_licences_in_order_of_precedence(write_sbom, metadata, licenses, reason):
    assert write_sbom.python_licenses(metadata) == (licenses, reason)


DEP5 = "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"


@pytest.mark.parametrize(("text", "licenses", "reason"), [
    (DEP5 + "License: GPL-2+\n\nFiles: *\nCopyright: x\nLicense: GPL-2+\n\nFiles: a/*\nlicense: Zlib\n text\n",
     [{"license": {"name": "GPL-2+"}}, {"license": {"id": "Zlib"}}], None),
    # A standalone License paragraph gives a text, not a licence of the package.
    (DEP5 + "\nFiles: *\nLicense: MIT or Apache-2.0\n\nLicense: BSD-3-clause\n text\n",
     [{"license": {"name": "MIT or Apache-2.0"}}], None),
    ("Format-Specification: http://svn.debian.org/wsvn/dep/web/deps/dep5.mdwn?op=file&rev=135\n\n"
     "Files: *\nLicense: LGPL-2.1+\n", [{"license": {"name": "LGPL-2.1+"}}], None),
    (DEP5 + "\nFiles: *\nCopyright: x\n", [],
     "/usr/share/doc/p/copyright is machine-readable (DEP-5) but has no License field in its header or Files "
     "paragraphs"),
    ("Copyright: x\nLicense: GPL-2+\n", [],
     "/usr/share/doc/p/copyright is not machine-readable (DEP-5): its licences are written there in prose"),
    ("", [], "/usr/share/doc/p/copyright is not machine-readable (DEP-5): its licences are written there in prose"),
    (None, [], "the image has no /usr/share/doc/p/copyright"),
])
def test_debian_licences_from_dep5_copyright_files(write_sbom, text, licenses, reason):
    assert write_sbom.debian_licenses("p", text) == (licenses, reason)


def test_copyright_files_are_read_through_links_and_missing_ones_are_none(write_sbom, tmp_path):
    (tmp_path / "libfoo-common").mkdir()
    (tmp_path / "libfoo-common" / "copyright").write_text(DEP5 + "\nFiles: *\nLicense: ISC\n")
    (tmp_path / "libfoo1").symlink_to("libfoo-common")
    (tmp_path / "libbar1").mkdir()
    found = write_sbom.read_copyrights(["libfoo1", "libbar1", "libbaz1"], tmp_path)
    assert found == {"libfoo1": DEP5 + "\nFiles: *\nLicense: ISC\n", "libbar1": None, "libbaz1": None}


def test_venv_distributions_reads_the_licence_metadata(write_sbom, tmp_path):
    dist_info = tmp_path / "example-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: example\nVersion: 1.0\nLicense: BSD 3-Clause License\n"
        "        \n        Copyright (c) 2020, Someone\nClassifier: License :: OSI Approved :: BSD License\n"
        "Classifier: Programming Language :: Python\nLicense-File: LICENSE\n\nThe description.\n")
    (found,) = write_sbom.venv_distributions([str(tmp_path)])
    assert found["name"] == "example" and found["metadata"]["Classifier"][0] == "License :: OSI Approved :: BSD License"
    assert found["metadata"]["License-File"] == ["LICENSE"]
    assert write_sbom.python_licenses(found["metadata"]) == ([{"license": {"name": "BSD License"}}], None)


@pytest.mark.parametrize(("component", "problem"), [
    ({"bom-ref": "x", "name": "x"},
     "the SBOM's component x gives no licence and no reason (trainstack:license-unknown)"),
    ({"bom-ref": "x", "properties": [{"name": LICENSE_UNKNOWN, "value": ""}]},
     "the SBOM's component x gives no licence and no reason (trainstack:license-unknown)"),
    ({"bom-ref": "x", "licenses": [{"license": {"url": "https://example.org"}}]},
     "the SBOM's component x has a licence without an SPDX id, name or expression"),
    ({"bom-ref": "x", "licenses": [{"expression": "MIT"}]}, None),
    ({"bom-ref": "x", "licenses": [{"license": {"name": "GPL-2+"}}, {"license": {"id": "MIT"}}]}, None),
    ({"bom-ref": "x", "properties": [{"name": LICENSE_UNKNOWN, "value": "why"}]}, None),
])
def test_license_problems_name_each_component_without_licence_or_reason(component, problem):
    assert license_problems({"components": [component]}) == ([problem] if problem else [])


def test_an_sbom_without_licences_fails_verification(cpu, sbom):
    stripped = {**sbom, "components": [{key: value for key, value in c.items() if key != "licenses"}
                                       if c["name"] == "tini" else c for c in sbom["components"]]}
    tini = components(sbom)["tini"]["bom-ref"]
    assert sbom_problems(cpu, json.dumps(stripped), constraints_of(PIP_LIST)) == [
        f"the SBOM's component {tini} gives no licence and no reason (trainstack:license-unknown)"]
