"""What the image is: its user, its manifest, its pins, and what it must not contain."""
import io
import json
import os
import stat
import tarfile
from pathlib import Path

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
    """Scans every layer of the image for the bundle's path or its exact bytes: in the engine's own layer folders
    where this host can read them (2 s here), else in the saved image's layer tars (48 s, most of it docker save)."""
    with open(CA_BUNDLE, "rb") as bundle_file:
        bundle = bundle_file.read()
    folders = overlay2_layer_folders(image)
    found = bundle_in_folders(folders, bundle) if folders else bundle_in_saved_layers(docker_client, image, bundle)
    assert found == []


def overlay2_layer_folders(image) -> list[str]:
    """The image's layers as the overlay2 driver keeps them on this host, lowest first; none where another driver
    keeps them or this host cannot read them (a rootless or remote engine)."""
    driver = image.attrs.get("GraphDriver") or {}
    data = driver.get("Data") or {}
    folders = [folder for folder in [*data.get("LowerDir", "").split(":"), data.get("UpperDir", "")] if folder]
    readable = all(os.access(folder, os.R_OK | os.X_OK) for folder in folders)
    return folders if driver.get("Name") == "overlay2" and folders and readable else []


def names_the_bundle(path: str) -> bool:
    return "build-ca" in path or "ca-bundle.crt" in path


def bundle_in_folders(folders: list[str], bundle: bytes) -> list[str]:
    found = []
    for folder in folders:
        for root, dirs, files in os.walk(folder):
            for name in dirs:
                relative = os.path.relpath(os.path.join(root, name), folder)
                if names_the_bundle(relative):
                    found.append(relative)
            for name in files:
                path = os.path.join(root, name)
                relative = os.path.relpath(path, folder)
                if names_the_bundle(relative) or holds_the_bundle(path, bundle):
                    found.append(relative)
    return found


def holds_the_bundle(path: str, bundle: bytes) -> bool:
    status = os.lstat(path)
    return stat.S_ISREG(status.st_mode) and status.st_size == len(bundle) and Path(path).read_bytes() == bundle


def bundle_in_saved_layers(docker_client, image, bundle: bytes) -> list[str]:
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
                if names_the_bundle(entry.name):
                    found.append(entry.name)
                elif entry.isfile() and entry.size == len(bundle) and layer.extractfile(entry).read() == bundle:
                    found.append(entry.name)
        except tarfile.ReadError:
            continue  # a blob that is not a layer (config, manifest)
    return found


class _ChunkReader(io.RawIOBase):
    """A file object over the docker SDK's chunk iterator, for streaming tarfile reads."""

    def __init__(self, chunks):
        self._chunks = iter(chunks)
        self._chunk = memoryview(b"")
        self._offset = 0

    def readable(self):
        return True

    def readinto(self, target):
        # An offset into the chunk, not a copy of its rest: tarfile reads 10 KiB at a time from 2 MiB chunks.
        while self._offset == len(self._chunk):
            try:
                self._chunk, self._offset = memoryview(next(self._chunks)), 0
            except StopIteration:
                return 0
        size = min(len(target), len(self._chunk) - self._offset)
        target[:size] = self._chunk[self._offset:self._offset + size]
        self._offset += size
        return size


def test_every_installed_module_has_a_checked_hash_pyc_of_its_source(in_image):
    """The builder's pip writes no pycs; venv_layers.py writes each RECORD's, patched sources' as patched."""
    summary = json.loads(in_image.run(["python", "/units/venv_pycs.py"]).strip().splitlines()[-1])
    assert summary["sources"] > 20000
    assert summary["compilable_missing"] == [] and summary["stale"] == [] and summary["timestamped"] == []
    assert summary["missing"] < 10
