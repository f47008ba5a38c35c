"""Release notes between two images (trainstack/image/release_notes.py), from small hand-made manifests and SBOMs
(fixtures/release-notes/); the golden notes are also the example on docs/reference/release-notes.md. Also what the
manifest gains from the build context (build_context.build_record) for them."""
import copy
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import docker.errors
import pytest

from trainstack import docker_client
from trainstack.errors import TrainstackError
from trainstack.image.build_context import build_record, in_image, write_build_context
from trainstack.image.dockerfile import BUILD_RECORD_PATH, IMAGE_ROOT
from trainstack.image.matrix import PATCHES_DIR, load_matrix
from trainstack.image.release_notes import ReleaseImage, read_release_image, release_notes
from trainstack.image.sources import SourceOptions

FIXTURES = Path(__file__).parent / "fixtures" / "release-notes"
FROM = ("trainstack:cpu-py3.11-torch2.12-tf2.20-hvd0.28.1-2026.10.02-5f0e1d2", "sha256:" + "1" * 64,
        ("ghcr.io/owner/trainstack@sha256:" + "a" * 64,))
TO = ("trainstack:cpu-py3.11-torch2.13-tf2.21-hvd0.28.1-2026.11.26-01a534e", "sha256:" + "2" * 64,
      ("ghcr.io/owner/trainstack@sha256:" + "b" * 64,))


def fixture_image(side: str, reference: str, image_id: str | None = None,
                  digests: tuple[str, ...] = ()) -> ReleaseImage:
    folder = FIXTURES / side
    return ReleaseImage(reference, json.loads((folder / "manifest.json").read_text()),
                        json.loads((folder / "sbom.cdx.json").read_text()), image_id, digests)


def test_release_notes_match_golden(golden):
    golden("release-notes.md", release_notes(fixture_image("from", *FROM), fixture_image("to", *TO)))


def test_an_image_against_itself_has_no_change():
    image = fixture_image("to", TO[0])
    notes = release_notes(image, image)
    for line in ("No version changed.", "No patch changed.", "No rule added or removed (6 apply).",
                 "11 components in `from`, 11 in `to`: 0 added, 0 removed, 0 changed."):
        assert line in notes
    assert "image ID" not in notes and "digests" not in notes


def test_patches_and_rules_a_manifest_lacks_are_not_recorded_rather_than_unchanged():
    old = fixture_image("from", "trainstack:old")
    for field in ("patches", "rules"):
        del old.manifest[field]
    notes = release_notes(old, fixture_image("to", "trainstack:new"))
    assert ("Not recorded: the manifest of `trainstack:old` has no `patches` (built before manifests recorded "
            "them), so their changes are unknown.") in notes
    assert "the manifest of `trainstack:old` has no `rules`" in notes
    assert "No patch changed." not in notes


@pytest.mark.parametrize(
    ("side", "change", "message"),
    [
        ("manifest", {"patches": ["horovod.patch"]},
         "trainstack:new patches = ['horovod.patch']: is not a patch list by component (valid: "),
        ("manifest", {"rules": "torch-python"},
         "trainstack:new rules = 'torch-python': is not a list of rule ids (valid: [\"tensorflow-2.21-python\", ...])"),
        ("sbom", {"components": [{"version": "1.0"}]},
         "trainstack:new SBOM components.0 = {'version': '1.0'}: is not a component with a name"),
    ],
)
def test_bad_fields_are_named_with_what_is_valid(side, change, message):
    new = fixture_image("to", "trainstack:new")
    getattr(new, side).update(copy.deepcopy(change))
    with pytest.raises(TrainstackError) as raised:
        release_notes(fixture_image("from", "trainstack:old"), new)
    assert str(raised.value).startswith(message)


def test_the_build_record_has_each_patch_with_its_sha256_and_the_rules_that_apply():
    matrix = load_matrix()
    cpu = matrix.flavor("cpu")
    record = build_record(cpu, matrix.rules)
    assert set(record) == {"patches", "rules"}
    assert [entry["file"] for entry in record["patches"]["horovod"]] == cpu.field("horovod", "patch")
    for entries in record["patches"].values():
        for entry in entries:
            assert entry["sha256"] == hashlib.sha256((PATCHES_DIR / entry["file"]).read_bytes()).hexdigest()
    assert "deepspeed-0.19-portable-cpu-ops" in record["rules"] and "tensorflow-2.21-cuda-stack" not in record["rules"]
    gpu_cu13 = build_record(matrix.flavor("gpu-cu13"), matrix.rules)
    assert "deepspeed" not in gpu_cu13["patches"] and "torch-pypi-cuda-13" in gpu_cu13["rules"]


def test_the_build_context_holds_the_build_record(tmp_path):
    matrix = load_matrix()
    context = write_build_context(matrix.flavor("cpu"), SourceOptions(), tmp_path / "ctx")
    record = json.loads(in_image(context / IMAGE_ROOT, BUILD_RECORD_PATH).read_text())
    assert record == build_record(matrix.flavor("cpu"), matrix.rules)


class FakeImages:
    def __init__(self, tags: list[str]):
        self.tags = tags

    def get(self, reference: str):
        raise docker.errors.ImageNotFound(reference)

    def list(self):
        return [SimpleNamespace(tags=self.tags), SimpleNamespace(tags=[])]


def test_an_image_not_here_is_refused_naming_the_images_that_are():
    client = SimpleNamespace(images=FakeImages(["trainstack:cpu", "debian:bookworm-slim",
                                                "localhost:5000/org/trainstack:cpu-py3.11", "trainstack-dev:x"]))
    with pytest.raises(TrainstackError) as raised:
        read_release_image(client, "--from-image", "trainstack:cpu-old", "trainstack")
    assert str(raised.value) == ("--from-image = 'trainstack:cpu-old': is not an image here (valid: "
                                 "localhost:5000/org/trainstack:cpu-py3.11, trainstack:cpu)")
    assert docker_client.local_references(SimpleNamespace(images=FakeImages([])), "trainstack") == []
