"""The README's list of the site's pages is made from the section indexes (trainstack/docsite/site_links.py; a stale
list fails tests/unit/docs/test_generated_pages.py): every page of a section's toctree, titled by its heading and
described by its index entry; a page without an entry, or an entry the README cannot show, is refused."""
from pathlib import Path

import pytest

from trainstack.docsite.site_links import section_entries, site_links

REPO = Path(__file__).resolve().parents[3]


def write_site(docs: Path, guides_index: str) -> None:
    (docs / "guides").mkdir(parents=True)
    (docs / "notebooks").mkdir()
    (docs / "index.md").write_text("# Home\n\n```{toctree}\n:hidden:\n\nguides/index\nnotebooks/index\n```\n")
    (docs / "guides" / "index.md").write_text(guides_index)
    (docs / "guides" / "one.md").write_text("(one)=\n# The first guide\n")
    (docs / "guides" / "two.md").write_text("# Two\n")
    (docs / "notebooks" / "index.md").write_text("# Notebooks\n\n```{toctree}\n:glob:\n\n*\n```\n")


def test_sections_and_pages_in_toctree_order_with_their_entries(tmp_path):
    write_site(tmp_path / "docs", "# Guides\n\n- {doc}`two`: the second,\n  on two lines.\n- {doc}`one`: the first.\n\n"
                                  "```{toctree}\n:hidden:\n\none\ntwo\n```\n")
    assert site_links(tmp_path / "docs") == (
        "[Guides](docs/guides/index.md):\n\n"
        "- [The first guide](docs/guides/one.md): the first.\n"
        "- [Two](docs/guides/two.md): the second, on two lines.\n\n"
        "[Notebooks](docs/notebooks/index.md)")


def test_a_page_without_an_entry_is_refused(tmp_path):
    write_site(tmp_path / "docs", "# Guides\n\n- {doc}`one`: the first.\n\n```{toctree}\n:hidden:\n\none\ntwo\n```\n")
    with pytest.raises(ValueError, match=r"docs/guides/index.md: two is in its toctree but has no entry"):
        site_links(tmp_path / "docs")


def test_an_entry_with_a_role_is_refused(tmp_path):
    write_site(tmp_path / "docs", "# Guides\n\n- {doc}`one`: see {ref}`x`.\n- {doc}`two`: two.\n\n"
                                  "```{toctree}\n:hidden:\n\none\ntwo\n```\n")
    with pytest.raises(ValueError, match="the entry of one links with a role"):
        site_links(tmp_path / "docs")


def test_every_section_of_the_site_is_in_the_readme_with_each_of_its_pages():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for section in ("quickstarts", "guides", "contributing", "reference"):
        for entry in section_entries(REPO / "docs", f"{section}/index"):
            assert f"- [{entry.title}]({entry.path}): " in readme
    assert "(docs/quickstarts/deepspeed.md)" in readme and "(docs/guides/deepspeed.md)" in readme
