"""The host tooling (trainstack/, tasks.py) imports only the standard library, itself and what the root
pyproject.toml declares, so that `pip install .` brings everything the tasks import."""
import ast
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[3]
# Import names that differ from their distribution's name.
DISTRIBUTION_OF = {"yaml": "pyyaml", "nacl": "pynacl"}


def imported_top_level_names() -> dict[str, str]:
    """{top-level module: a file that imports it} over the host tooling."""
    names = {}
    for path in [REPO / "tasks.py", *sorted((REPO / "trainstack").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                names.setdefault(module.partition(".")[0], str(path.relative_to(REPO)))
    return names


def test_every_import_of_the_host_tooling_is_declared() -> None:
    declared = {Requirement(line).name.lower()
                for line in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]}
    undeclared = {name: where for name, where in imported_top_level_names().items()
                  if name not in sys.stdlib_module_names and name != "trainstack"
                  and DISTRIBUTION_OF.get(name, name) not in declared}
    assert undeclared == {}
    assert {"pooltemplates", "trainrun"} <= declared
