"""The code maps of docs/reference/layout.md (moved there from the README's Layout) name every top-level entry of the
repository and every folder and module of trainstack, trainrun and pooltemplates, and nothing that is not there."""
import re
from pathlib import Path

import pytest

from trainstack.docsite.code_map import map_problems, parse_map, repository_files

REPO = Path(__file__).resolve().parents[3]
LAYOUT = REPO / "docs" / "reference" / "layout.md"
CODE_MAP = re.compile(r"^```\{code-map\} (?P<root>\S+)\n(?P<options>(?::\w+: .*\n)*)(?P<text>.*?)^```", re.S | re.M)
ROOTS = {".", "trainstack", "launcher/trainrun", "templates/pooltemplates"}


def code_maps() -> dict[str, str]:
    return {match["root"]: match["text"] for match in CODE_MAP.finditer(LAYOUT.read_text(encoding="utf-8"))}


@pytest.fixture(scope="module")
def files() -> list[str]:
    return repository_files(REPO)


def test_the_layout_maps_the_top_level_and_the_three_packages():
    assert set(code_maps()) == ROOTS


@pytest.mark.parametrize("root", sorted(ROOTS))
def test_map_names_every_folder_and_module_and_nothing_else(root, files):
    assert map_problems(code_maps()[root], root, files) == []


def test_a_module_or_folder_without_a_line_is_named():
    files = ["pkg/a.py", "pkg/sub/b.py", "pkg/sub/data.yaml", "pkg/__init__.py"]
    text = "pkg/\n  a.py     the a\n"
    assert map_problems(text, "pkg", files) == [(0, "pkg/sub/ has no line in the map of pkg"),
                                                (0, "pkg/sub/b.py has no line in the map of pkg")]


def test_a_line_for_something_gone_is_named_with_its_line():
    text = "pkg/\n  a.py     the a\n           continued\n  gone.py  not there\n"
    assert map_problems(text, "pkg", ["pkg/a.py"]) == [(3, "pkg/gone.py is named but does not exist")]


def test_the_top_level_map_needs_every_entry_but_not_their_contents():
    files = ["README.md", "docs/conf.py", "docs/guides/x.md"]
    assert map_problems("README.md  the front page\n", ".", files) == [(0, "docs/ has no line in the map of .")]
    assert map_problems("README.md  x\ndocs/  the site\n", ".", files) == []


def test_descriptions_continue_at_their_column():
    entries = parse_map("pkg/\n  a.py   one\n         two words.py\n  b/\n    c.py\n", "pkg")
    assert [entry.path for entry in entries] == ["pkg/", "pkg/a.py", "pkg/b/", "pkg/b/c.py"]
