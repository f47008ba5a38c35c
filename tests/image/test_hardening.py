"""What the built image carries for its users' safety: no setuid/setgid files, and an SBOM of what it holds."""
import json

import pytest

from trainrun.image_contract import MANIFEST_PATH, SBOM_PATH
from trainstack.image.manifest import SETID_FIND, setid_problems
from trainstack.image.sbom import debian_packages, normalize, python_packages, read_image_sbom


@pytest.fixture(scope="module")
def sbom(docker_client, image):
    return read_image_sbom(docker_client, image.id)


@pytest.fixture(scope="module")
def manifest(in_image):
    return json.loads(in_image.run(["cat", MANIFEST_PATH]))


def test_no_setuid_or_setgid_files(in_image):
    """Listed as root, who can read every folder; none may be left, not even su's or ssh-keysign's."""
    output = in_image.run(SETID_FIND, user="root")
    assert setid_problems(0, output) == []
    assert output.strip() == ""


def test_root_still_runs_what_lost_its_bit(in_image):
    assert in_image.run(["su", "trainer", "-c", "id -un"], user="root").strip() == "trainer"


def test_sbom_is_cyclonedx_beside_the_manifest(in_image, sbom, image_flavor):
    assert (sbom["bomFormat"], sbom["specVersion"]) == ("CycloneDX", "1.5")
    assert sbom["metadata"]["component"]["version"] == image_flavor.name
    assert {"constraints.txt", "manifest.json", "sbom.cdx.json"} <= set(in_image.run(["ls", "/etc/trainstack"]).split())
    assert in_image.run(["stat", "-c", "%U %a", SBOM_PATH]).strip() == "root 644"


def test_sbom_lists_torch_horovod_and_openmpi(sbom, manifest):
    python = python_packages(sbom)
    assert python["torch"] == manifest["packages"]["torch"]
    assert python["horovod"] == manifest["packages"]["horovod"] == "0.28.1"
    purls = {component.get("purl") for component in sbom["components"]}
    assert f"pkg:pypi/torch@{manifest['packages']['torch'].replace('+', '%2B')}" in purls
    assert "pkg:pypi/horovod@0.28.1" in purls
    debian = debian_packages(sbom)
    for package in ("openmpi-bin", "libopenmpi3"):
        assert debian[package]["source"] == "openmpi"
        assert debian[package]["version"].startswith(manifest["libraries"]["openmpi"])
        assert debian[package]["distro"] == "debian-12"
    assert any(purl and purl.startswith("pkg:deb/debian/openmpi-bin@") and "arch=" in purl for purl in purls)


def test_sbom_lists_every_distribution_pip_lists(in_image, sbom):
    listed = json.loads(in_image.run(["sh", "-c", "pip list --format json 2>/dev/null"]))
    assert {normalize(entry["name"]): entry["version"] for entry in listed} == python_packages(sbom)


def test_sbom_lists_every_installed_debian_package(in_image, sbom):
    output = in_image.run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Status}\\n"])
    installed = {name: version for name, version, status in (line.split() for line in output.splitlines())
                 if status == "installed"}
    assert {name: package["version"] for name, package in debian_packages(sbom).items()} == installed
