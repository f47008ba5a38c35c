"""Every page and table generated from the code (CLI, tasks, template fields, matrix, workflows, in-image contract,
the README's versions table) is committed as the code gives it now: a stale one fails, named by file and line."""
from pathlib import Path

import pytest

from trainstack.docsite import pages

REPO = Path(__file__).resolve().parents[3]


def test_no_generated_page_is_stale():
    stale = pages.stale(REPO)
    assert not stale, "\n".join(str(page) for page in stale)


def test_a_stale_table_is_named_by_file_and_first_differing_line(tmp_path, monkeypatch):
    (tmp_path / "page.md").write_text("# Page\n\n<!-- t:start -->\n| a |\n| old |\n<!-- t:end -->\nafter\n")
    monkeypatch.setattr(pages, "GENERATED", (pages.Generated("page.md", "t", "x", lambda: "| a |\n| new |"),))
    [stale] = pages.stale(tmp_path)
    assert (stale.path, stale.line, stale.expected, stale.found) == ("page.md", 5, "| new |", "| old |")
    assert str(stale).startswith("page.md:5: stale generated text")
    assert pages.write(tmp_path) == ["page.md"] and pages.stale(tmp_path) == []
    assert (tmp_path / "page.md").read_text().endswith("| new |\n<!-- t:end -->\nafter\n")


def test_a_whole_generated_page_says_where_it_comes_from(tmp_path, monkeypatch):
    monkeypatch.setattr(pages, "GENERATED", (pages.Generated("ref/page.md", None, "code.py", lambda: "# Ref\n"),))
    [stale] = pages.stale(tmp_path)
    assert stale.line == 1 and stale.found == "(end of file)"
    pages.write(tmp_path)
    assert (tmp_path / "ref" / "page.md").read_text() == pages.HEADER.format(source="code.py") + "# Ref\n"


def test_a_page_without_its_markers_is_refused(tmp_path, monkeypatch):
    (tmp_path / "page.md").write_text("# Page\n")
    monkeypatch.setattr(pages, "GENERATED", (pages.Generated("page.md", "t", "x", lambda: "x"),))
    with pytest.raises(ValueError, match="page.md lacks the <!-- t:start --> ... <!-- t:end --> markers"):
        pages.stale(tmp_path)


def test_the_cli_reference_has_every_backend_and_option():
    text = (REPO / "docs" / "reference" / "trainrun.md").read_text()
    for backend in ("mpi", "torch", "spark", "doctor", "selftest"):
        assert f"## `trainrun {backend}`" in text
    assert "`--nproc-per-node N|auto|gpu|cpu` (also `--nproc_per_node`)" in text.replace("\\|", "|")
