"""Image naming: one function makes references; and the in-image path the templates' YAML spells is the
contract's (trainrun.image_contract; its copies: tests/unit/launcher/test_image_contract.py)."""
import yaml

from pooltemplates import package_file, packaged_templates
from trainrun.image_contract import DISCOVERY_SCRIPT_PATH
from trainstack.image.naming import flavor_image, image_reference


def test_references_with_and_without_a_registry() -> None:
    assert image_reference("trainstack", "cpu") == "trainstack:cpu"
    assert image_reference("trainstack", "cpu", "localhost:5000") == "localhost:5000/trainstack:cpu"
    assert flavor_image("gpu") == "trainstack:gpu"


def test_templates_point_at_the_images_discovery_script() -> None:
    scripts = {yaml.safe_load(package_file(f"pools/{name}.yaml").read_text()).get("gpu", {}).get("discovery_script")
               for name in packaged_templates()}
    assert scripts - {None} == {DISCOVERY_SCRIPT_PATH}
