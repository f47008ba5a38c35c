"""The licences the image carries: its SBOM gives each component's licences or why they could not be read, every Debian
package keeps its copyright file, and every Python distribution the licence files its metadata names."""
import json

import pytest

from trainstack.image.sbom import license_problems, license_unknown, read_image_sbom

# Lists each installed package without /usr/share/doc/PACKAGE/copyright (a link to another package's folder counts).
MISSING_COPYRIGHT = r"""dpkg-query -W -f '${Package} ${db:Status-Status}\n' | while read -r package status; do
  [ "$status" = installed ] && [ ! -f "/usr/share/doc/$package/copyright" ] && echo "$package"
done; true"""
# Lists each distribution's License-File entries that are not in its .dist-info: in licenses/ (core metadata 2.4),
# or where earlier builders put them (its top, or license_files/ by older hatchling and maturin).
MISSING_LICENSE_FILES = """
import importlib.metadata, json
def held(dist, path):
    try:
        return dist.read_text(path) is not None
    except UnicodeDecodeError:
        return True
missing = []
for dist in importlib.metadata.distributions():
    for name in dist.metadata.get_all("License-File") or []:
        if not any(held(dist, folder + name) for folder in ("licenses/", "", "license_files/")):
            missing.append(f"{dist.metadata['Name']}: {name}")
print(json.dumps(missing))
"""


@pytest.fixture(scope="module")
def sbom(docker_client, image):
    return read_image_sbom(docker_client, image.id)


def test_every_sbom_component_gives_a_licence_or_why_not(sbom):
    assert license_problems(sbom) == []
    assert all(component.get("licenses") or license_unknown(component) for component in sbom["components"])


def test_the_projects_distributions_are_apache_2(sbom):
    own = {component["name"]: component.get("licenses") for component in sbom["components"]
           if component["bom-ref"].startswith("trainstack:")}
    assert own == {"pooltemplates": [{"expression": "Apache-2.0"}], "trainrun": [{"expression": "Apache-2.0"}]}


def test_every_debian_package_has_its_copyright_file(in_image, sbom):
    assert in_image.run(["sh", "-c", MISSING_COPYRIGHT]).split() == []
    # ... so no Debian component of the SBOM lacks a licence for want of one.
    assert [component["name"] for component in debian_components(sbom)
            if license_unknown(component).startswith("the image has no")] == []


def test_most_debian_licences_are_read_from_dep5_copyright_files(sbom):
    """Debian's machine-readable copyright files give most packages' licences; the others are written in prose."""
    debian = debian_components(sbom)
    read = [component for component in debian if component.get("licenses")]
    assert len(read) > len(debian) / 2, f"{len(read)} of {len(debian)} Debian packages with licences"


def test_every_distribution_keeps_the_licence_files_its_metadata_names(in_image):
    assert json.loads(in_image.run(["python", "-c", MISSING_LICENSE_FILES]).strip().splitlines()[-1]) == []


def test_the_project_licence_is_in_the_image(in_image):
    text = in_image.run(["python", "-c", "import importlib.metadata as m; "
                                         "print(m.distribution('trainrun').read_text('licenses/LICENSE'))"])
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def debian_components(sbom: dict) -> list[dict]:
    return [component for component in sbom["components"] if str(component.get("purl", "")).startswith("pkg:deb/")]
