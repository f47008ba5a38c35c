"""The in-image contract (paths, the sshd port, the image's user, the examples folder) has one home,
trainrun.image_contract: trainrun's modules and the host tooling import it, and the templates import
pooltemplates.image_contract, a copy generated from it. A stale copy fails here; `UPDATE_GOLDEN=1 pytest
tests/unit/launcher/test_image_contract.py` regenerates it (review its diff)."""
from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from pooltemplates import image_contract as templates_copy
from trainrun import image_contract

REPO = Path(__file__).resolve().parents[3]
SOURCE = Path(image_contract.__file__)
COPY = Path(templates_copy.__file__)
CONTRACT_NAMES = [name for name in vars(image_contract) if name.isupper()]
IN_IMAGE_PATHS = sorted({value for value in vars(image_contract).values()
                         if isinstance(value, str) and value.startswith(("/etc/trainstack", "/opt/", "/home/"))})


def generated_copy(source: str) -> str:
    """trainrun/image_contract.py's assignments and comments under a docstring saying what made the copy."""
    docstring_end = ast.parse(source).body[0].end_lineno
    body = "".join(source.splitlines(keepends=True)[docstring_end:])
    return ('"""Generated from launcher/trainrun/image_contract.py, where each name is explained; do not edit.\n'
            "pooltemplates does not depend on trainrun, so it carries this copy; tests/unit/launcher/\n"
            'test_image_contract.py fails when it is stale and regenerates it with UPDATE_GOLDEN=1."""\n' + body)


def test_the_templates_copy_is_generated_from_the_contract() -> None:
    expected = generated_copy(SOURCE.read_text(encoding="utf-8"))
    if os.environ.get("UPDATE_GOLDEN") == "1":
        COPY.write_text(expected, encoding="utf-8")
    assert COPY.read_text(encoding="utf-8") == expected, f"{COPY} is stale; regenerate it with UPDATE_GOLDEN=1"


@pytest.mark.parametrize("name", CONTRACT_NAMES)
def test_the_copy_holds_every_name(name: str) -> None:
    assert getattr(templates_copy, name) == getattr(image_contract, name)


def test_the_contract_stands_alone() -> None:
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    assert not [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
                and not (isinstance(node, ast.ImportFrom) and node.module == "__future__")]


def code_strings(path: Path) -> list[str]:
    """The string literals of a module's code (f-strings' parts too), docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


@pytest.mark.parametrize("folder", ["launcher/trainrun", "templates/pooltemplates", "trainstack"])
def test_nothing_else_spells_an_in_image_path(folder: str) -> None:
    spelled = [f"{path.relative_to(REPO)}: {value}" for path in sorted((REPO / folder).rglob("*.py"))
               if path not in (SOURCE, COPY)
               for text in code_strings(path) for value in IN_IMAGE_PATHS if value in text]
    assert spelled == []


def test_the_image_scripts_default_to_the_contract() -> None:
    dockerfile = (REPO / "images" / "Dockerfile.j2").read_text(encoding="utf-8")
    assert "useradd --create-home --uid {{ uid }} --shell /bin/bash {{ user }}" in dockerfile
    sshd = (REPO / "images" / "scripts" / image_contract.SSHD_COMMAND).read_text(encoding="utf-8")
    assert f"port=${{TRAINSTACK_SSHD_PORT:-{image_contract.SSHD_PORT}}}" in sshd
    assert f"keys_dir=${{TRAINSTACK_SSH_DIR:-{image_contract.SSH_KEYS_DIR}}}" in sshd
    entrypoint = (REPO / "images" / "scripts" / "trainstack-entrypoint").read_text(encoding="utf-8")
    assert f"pristine_examples={image_contract.EXAMPLES_DIR}\n" in entrypoint
