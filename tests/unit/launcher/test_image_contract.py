"""The in-image contract (paths, the sshd port, the examples folder) has one copy, trainrun.image_contract: the
host tooling reads it, trainrun's modules read it, and the templates' own copies are held to it."""
from __future__ import annotations

from pathlib import Path

import pytest

from pooltemplates.targets import k8s
from trainrun import image_contract
from trainstack import identity

LAUNCHER = Path(image_contract.__file__).parent
CONTRACT_NAMES = [name for name in vars(image_contract) if name.isupper()]


@pytest.mark.parametrize("name", CONTRACT_NAMES)
def test_the_host_tooling_reads_the_contract(name) -> None:
    assert getattr(identity, name) is getattr(image_contract, name)


def test_the_templates_copies_are_the_contract() -> None:
    # pooltemplates does not depend on trainrun (pip install ./templates alone renders pools), so it keeps these.
    assert k8s.EXAMPLES_DIR == image_contract.EXAMPLES_DIR
    assert k8s.IMAGE_HOME == image_contract.IMAGE_HOME
    assert k8s.IMAGE_UID == image_contract.IMAGE_USER_UID
    assert k8s.SSH_PORT == image_contract.SSHD_PORT
    assert k8s.SSHD_COMMAND == [image_contract.SSHD_COMMAND]


def test_no_other_launcher_module_spells_an_in_image_path() -> None:
    paths = {value for value in vars(image_contract).values() if isinstance(value, str) and value.startswith("/")}
    prefixes = {"/etc/trainstack", "/opt/trainstack", image_contract.IMAGE_HOME, *paths}
    spelled = [f"{path.relative_to(LAUNCHER)}: {prefix}" for path in sorted(LAUNCHER.rglob("*.py"))
               if path.name != "image_contract.py"
               for prefix in sorted(prefixes) if prefix in path.read_text(encoding="utf-8")]
    assert spelled == []
