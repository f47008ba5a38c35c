"""The error catalogue (docs/reference/errors.md) has an entry for every error family the code can raise (one error
class raised by one module, found in the source), names none the code no longer raises, and keeps an entry for each
platform error users of other images meet."""
import ast
import re
from pathlib import Path

import pytest

from trainstack.docsite.error_families import (
    Family,
    catalogued_families,
    error_classes,
    error_families,
    family_messages,
)

REPO = Path(__file__).resolve().parents[3]
CATALOGUE = REPO / "docs" / "reference" / "errors.md"
PLATFORM_ERRORS = ("errors-shm", "errors-pip-replaces-torch", "errors-python-version-mismatch", "errors-jupyter-token",
                   "errors-cuda-driver", "errors-distributor-gpus")


@pytest.fixture(scope="module")
def raised() -> set[Family]:
    return error_families(REPO)


def test_every_family_the_code_raises_has_an_entry(raised):
    missing = sorted(raised - set(catalogued_families(CATALOGUE.read_text(encoding="utf-8"))))
    assert not missing, "families without an entry in docs/reference/errors.md:\n" + "\n".join(map(str, missing))


def test_no_entry_names_a_family_the_code_does_not_raise(raised):
    named = catalogued_families(CATALOGUE.read_text(encoding="utf-8"))
    gone = {family: line for family, line in named.items() if family not in raised}
    assert not gone, "\n".join(f"docs/reference/errors.md:{line}: {family} is not raised"
                                for family, line in gone.items())


def test_each_platform_error_has_an_entry():
    text = CATALOGUE.read_text(encoding="utf-8")
    assert [anchor for anchor in PLATFORM_ERRORS if f"({anchor})=" not in text] == []


def test_families_are_found_through_subclasses_and_aliases():
    modules = [("errors.py", ast.parse("class BaseError(Exception): ...\n"
                                       "class TrainstackError(Exception): ...\n"
                                       "class PoolError(TrainstackError): ...\n"
                                       "bad_value = TrainstackError.bad_option\n")),
               ("pool.py", ast.parse("def up():\n    raise PoolError.bad_option('--workers', 0, 'r', 'v')\n")),
               ("task.py", ast.parse("def t():\n    raise bad_value('--port', 1, 'is in use', 'a free port')\n"))]
    assert {"TrainstackError", "PoolError"} <= error_classes(modules)
    assert "BaseError" not in error_classes(modules)


def test_messages_show_the_problem_format():
    messages = family_messages(REPO)[Family("launcher/trainrun/remote.py", "UsageError")]
    assert any(re.match(r"\{option\} = …: does not resolve", message) for message in messages), messages


def test_catalogued_families_carry_their_line():
    text = "# t\n\n```{raised-by}\na.py AError\nb.py BError\n```\n"
    assert catalogued_families(text) == {Family("a.py", "AError"): 4, Family("b.py", "BError"): 5}
