"""What the image is: its user, its manifest, its pins, and what it must not contain."""
import io
import json
import tarfile

import pytest

from trainstack.image.build import verify_image
from trainstack.image.manifest import HOROVOD_NAMES

CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def test_runs_as_non_root(in_image):
    assert in_image.run(["id", "-un"]).strip() == "trainer"
    assert in_image.run(["id", "-u"]).strip() != "0"


def test_manifest_and_installed_versions_match_the_matrix(docker_client, image, image_flavor):
    manifest = verify_image(docker_client, image.id, image_flavor)
    assert manifest["packages"]["horovod"] == "0.28.1"
    wanted = {HOROVOD_NAMES[name] for name in image_flavor.field("horovod", "frameworks")}
    assert "PyTorch" in wanted and wanted <= set(manifest["horovod"]["frameworks"])


# A framework and one of the packages that came with the frameworks users train with (transformers, Lightning,
# MLflow, ...): the constraints file pins every distribution installed.
REPLACEMENTS = ["torch==2.12.0", "transformers==4.57.0"]


@pytest.mark.parametrize("requirement", REPLACEMENTS)
def test_constraints_refuse_replacing_the_stack(in_image, requirement):
    output = in_image.run(["pip", "install", "--no-index", requirement], expect=1)
    assert refused_by_the_constraints(requirement, output), output


def test_pip_in_a_notebook_refuses_replacing_the_stack(in_image):
    """`%pip install` runs the kernel's pip under the same constraints; the kernel keeps its version."""
    requirement = REPLACEMENTS[1]
    name, version = requirement.split("==")
    cells = [f"%pip install --no-index {requirement}",
             f"import importlib.metadata\nimportlib.metadata.version({name!r})"]
    pip, installed = json.loads(in_image.run(["python", "/units/run_cells.py", json.dumps(cells)],
                                             timeout=300).strip().splitlines()[-1])
    shown = "".join(output.get("text", "") for output in pip)
    assert refused_by_the_constraints(requirement, shown), shown
    assert installed[0]["data"]["text/plain"] != repr(version), installed


def refused_by_the_constraints(requirement: str, output: str) -> bool:
    """pip's ResolutionImpossible naming the constraint on the requirement's distribution."""
    return "ResolutionImpossible" in output and f"(constraint) {requirement.split('==')[0]}==" in output


def test_no_ca_bundle_or_proxy_in_history(docker_client, image):
    history = json.dumps(docker_client.api.history(image.id))
    for leftover in ("build-ca", "ca-bundle", "PIP_CERT", "HTTP_PROXY", "HTTPS_PROXY", "wheelhouse"):
        assert leftover not in history
    config = json.dumps(image.attrs["Config"])
    for leftover in ("PIP_CERT", "PROXY", "build-ca"):
        assert leftover not in config


def test_no_layer_holds_the_build_ca_bundle(docker_client, image):
    """Scans every layer of the saved image for the bundle's path or its exact bytes."""
    with open(CA_BUNDLE, "rb") as bundle_file:
        bundle = bundle_file.read()
    found = []
    outer = tarfile.open(fileobj=_ChunkReader(docker_client.api.get_image(image.id)), mode="r|")
    for member in outer:
        if not member.name.endswith("layer.tar") and not member.name.startswith("blobs/"):
            continue
        layer_data = outer.extractfile(member)
        if layer_data is None:
            continue
        try:
            layer = tarfile.open(fileobj=layer_data, mode="r|")
            for entry in layer:
                if "build-ca" in entry.name or "ca-bundle.crt" in entry.name:
                    found.append(entry.name)
                elif entry.isfile() and entry.size == len(bundle) and layer.extractfile(entry).read() == bundle:
                    found.append(entry.name)
        except tarfile.ReadError:
            continue  # a blob that is not a layer (config, manifest)
    assert found == []


class _ChunkReader(io.RawIOBase):
    """A file object over the docker SDK's chunk iterator, for streaming tarfile reads."""

    def __init__(self, chunks):
        self._chunks = iter(chunks)
        self._buffer = b""

    def readable(self):
        return True

    def readinto(self, target):
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(target), len(self._buffer))
        target[:size], self._buffer = self._buffer[:size], self._buffer[size:]
        return size


def test_every_installed_module_has_a_checked_hash_pyc_of_its_source(in_image):
    """The builder's pip writes no pycs; venv_layers.py writes each RECORD's, patched sources' as patched."""
    summary = json.loads(in_image.run(["python", "/units/venv_pycs.py"]).strip().splitlines()[-1])
    assert summary["sources"] > 20000
    assert summary["compilable_missing"] == [] and summary["stale"] == [] and summary["timestamped"] == []
    assert summary["missing"] < 10
