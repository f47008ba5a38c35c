"""Image naming: one function makes references; the tags come from the manifest and the build's labels; and the in-image path the templates' YAML spells is the
contract's (trainrun.image_contract; its copies: tests/unit/launcher/test_image_contract.py)."""
import pytest
import yaml

from pooltemplates import package_file, packaged_templates
from trainrun.image_contract import DISCOVERY_SCRIPT_PATH
from trainstack.errors import TrainstackError
from trainstack.image.naming import (
    CREATED_LABEL,
    REFERENCE,
    REVISION_LABEL,
    flavor_image,
    image_reference,
    image_tags,
    immutable_tag,
    published_image,
)


def test_references_with_and_without_a_registry() -> None:
    assert image_reference("trainstack", "cpu") == "trainstack:cpu"
    assert image_reference("trainstack", "cpu", "localhost:5000") == "localhost:5000/trainstack:cpu"
    assert flavor_image("gpu") == "trainstack:gpu"
    assert published_image("cpu") == "ghcr.io/trainstack/trainstack:cpu"


def test_a_build_of_a_published_flavor_also_carries_the_names_a_pull_gives_it() -> None:
    from trainstack.image.build import published_names

    manifest = {"flavor": "cpu", "python": "3.11.2", "libraries": {},
                "packages": {"torch": "2.13.0+cpu", "tensorflow": "2.21.0", "horovod": "0.28.1"}}
    assert published_names("trainstack", manifest) == [
        "ghcr.io/trainstack/trainstack:cpu-py3.11-torch2.13-tf2.21-hvd0.28.1", "ghcr.io/trainstack/trainstack:cpu"]
    assert published_names("trainstack", {**manifest, "flavor": "gpu-cu13"}) == []


def test_templates_point_at_the_images_discovery_script() -> None:
    scripts = {yaml.safe_load(package_file(f"pools/{name}.yaml").read_text()).get("gpu", {}).get("discovery_script")
               for name in packaged_templates()}
    assert scripts - {None} == {DISCOVERY_SCRIPT_PATH}


MANIFEST = {"flavor": "cpu", "python": "3.11.2", "libraries": {"cuda": None},
            "packages": {"torch": "2.13.0+cpu", "tensorflow-cpu": "2.21.0", "horovod": "0.28.1"}}
LABELS = {CREATED_LABEL: "2026-11-26T23:59:59Z", REVISION_LABEL: "01a534e" + "0" * 33}


def test_immutable_tag_first_then_the_moving_ones() -> None:
    assert image_tags(MANIFEST, LABELS) == ["cpu-py3.11-torch2.13-tf2.21-hvd0.28.1-2026.11.26-01a534e",
                                            "cpu-py3.11-torch2.13-tf2.21-hvd0.28.1", "cpu"]
    assert REFERENCE.fullmatch(image_reference("trainstack", image_tags(MANIFEST, LABELS)[0], "localhost:5000"))


def test_an_image_without_a_revision_has_no_immutable_tag() -> None:
    labels = {CREATED_LABEL: LABELS[CREATED_LABEL]}
    assert immutable_tag(MANIFEST, labels) is None
    assert image_tags(MANIFEST, labels) == ["cpu-py3.11-torch2.13-tf2.21-hvd0.28.1", "cpu"]


@pytest.mark.parametrize(("labels", "message"), [
    ({**LABELS, REVISION_LABEL: "HEAD"},
     "label org.opencontainers.image.revision = 'HEAD': is not a git commit (valid: 40 or 64 lower-case hex digits)"),
    ({REVISION_LABEL: LABELS[REVISION_LABEL]},
     "label org.opencontainers.image.created = '': is not the build's time (valid: UTC as YYYY-MM-DDTHH:MM:SSZ"),
])
def test_labels_that_name_no_build_are_refused(labels: dict, message: str) -> None:
    with pytest.raises(TrainstackError) as raised:
        immutable_tag(MANIFEST, labels)
    assert str(raised.value).startswith(message)
