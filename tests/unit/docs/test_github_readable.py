"""The quickstarts and guides read on GitHub as they read on the site (issue 56): no {literalinclude}, which GitHub
shows as a box holding only its options, and no {ref} or {doc} role, which it shows as plain text. Code from a file is
a shown block instead (`<!-- example-code ...:start -->`, trainstack/docsite/shown.py), and a cross-reference a
Markdown link to the target's file and its heading's anchor, `[text](../guides/images.md#open-mpis-defaults)`, which
GitHub follows and MyST resolves (myst_heading_anchors in docs/conf.py; the strict build fails on one it cannot)."""
import re
from pathlib import Path

import pytest
from myst_parser.slugs import github_slugify

REPO = Path(__file__).resolve().parents[3]
PAGES = sorted(path.relative_to(REPO).as_posix() for folder in ("quickstarts", "guides")
               for path in (REPO / "docs" / folder).glob("*.md"))
UNREADABLE_ON_GITHUB = re.compile(r"\{literalinclude\}|\{(?:ref|doc)\}`")
LOCAL_LINK = re.compile(r"\]\((?P<file>[^)\s#:]*\.(?:md|ipynb))?(?:#(?P<anchor>[^)\s]+))?\)")
HEADING = re.compile(r"^#{1,3} (?P<title>.+)$", re.M)
FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1$", re.M | re.S)


def unreadable(text: str) -> list[str]:
    """`line N: what` of each directive or role GitHub cannot show."""
    return [f"line {text.count(chr(10), 0, match.start()) + 1}: {match.group(0)}"
            for match in UNREADABLE_ON_GITHUB.finditer(text)]


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings down to level 3, as GitHub and MyST make them (a repeated one gets -1, -2)."""
    found: set[str] = set()
    for match in HEADING.finditer(FENCE.sub("", text)):
        slug = github_slugify(re.sub(r"[`*]", "", match["title"]).strip())
        unique, count = slug, 0
        while unique in found:
            count += 1
            unique = f"{slug}-{count}"
        found.add(unique)
    return found


@pytest.mark.parametrize("page", PAGES)
def test_no_directive_or_role_that_github_cannot_show(page):
    assert unreadable((REPO / page).read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("page", PAGES)
def test_each_link_to_a_page_names_a_file_and_a_heading_it_has(page):
    text = (REPO / page).read_text(encoding="utf-8")
    problems = []
    for match in LOCAL_LINK.finditer(FENCE.sub("", text)):
        if match["file"] is None and match["anchor"] is None:
            continue
        target = (REPO / page).parent / match["file"] if match["file"] else REPO / page
        if not target.is_file():
            problems.append(f"{match.group(0)}: no file {target.relative_to(REPO)}")
        elif match["anchor"] and target.suffix == ".md" and match["anchor"] not in anchors(
                target.read_text(encoding="utf-8")):
            problems.append(f"{match.group(0)}: {target.relative_to(REPO)} has no heading with that anchor")
    assert problems == []


def test_roles_and_includes_are_found_with_their_line():
    text = "# t\n\nSee {ref}`x` and [y](y.md).\n\n```{literalinclude} a.py\n```\n\n{doc}`z`\n"
    assert unreadable(text) == ["line 3: {ref}`", "line 5: {literalinclude}", "line 8: {doc}`"]


def test_anchors_are_githubs():
    text = ("# A page\n\n## Open MPI's defaults\n\n```md\n## not a heading\n```\n\n### `trainrun selftest`\n\n"
            "## Spark\n\n## Spark\n")
    assert anchors(text) == {"a-page", "open-mpis-defaults", "trainrun-selftest", "spark", "spark-1"}
