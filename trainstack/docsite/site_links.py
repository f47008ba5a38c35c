"""The README's list of the site's pages, made from the site itself: its sections in the order of the home page's
table of contents (docs/index.md), each section's pages in the order of its index's table of contents, each page
named by its title and described by its entry in the section index (a `- [Title](page.md): what it holds` line, or
`- {doc}`page`: ...`, or the quickstarts' table row). A page added to a section's table of contents without an entry in
its index is refused, naming both."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TOCTREE = re.compile(r"^```\{toctree\}\n(?P<body>.*?)^```", re.S | re.M)
# A page linked by a role (`{doc}`page``) or by a Markdown link to its file (`[Title](page.md)`, which GitHub follows).
PAGE_LINK = r"(?:\{doc\}`(?P<doc>[^`]+)`|\[[^\]\n]*\]\((?P<file>[^)#\s]+)\.(?:md|ipynb)\))"
BULLET_ENTRY = re.compile(r"^- " + PAGE_LINK + r": (?P<text>.*?)(?=^\S|\Z)", re.S | re.M)
TABLE_ROW = re.compile(r"^\|(?P<cells>.*" + PAGE_LINK + r".*)\|$", re.M)
# What the README cannot show: a role, or a link relative to the index's folder.
LINK = re.compile(r"\{(?:doc|ref)\}`|\]\(")


@dataclass(frozen=True)
class Entry:
    title: str
    path: str  # relative to the repository
    text: str  # what the section index says the page holds


def title(page: Path) -> str:
    """The page's first `# ` heading."""
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    raise ValueError(f"{page} has no `# ` title")


def toctree_pages(index: Path) -> list[str] | None:
    """The documents an index's toctree lists, in order; None where it lists them by a glob."""
    match = TOCTREE.search(index.read_text(encoding="utf-8"))
    if match is None:
        raise ValueError(f"{index} has no toctree")
    lines = [line.strip() for line in match["body"].splitlines()]
    if ":glob:" in lines:
        return None
    return [line for line in lines if line and not line.startswith(":")]


def index_descriptions(index: Path) -> dict[str, str]:
    """{page: what the index says it holds}: a bullet `- {doc}`page`: TEXT`, or a table row whose last cell links the
    page (its second cell: what users have, in the quickstarts' table)."""
    text = index.read_text(encoding="utf-8")
    found = {_page(match): " ".join(match["text"].split()) for match in BULLET_ENTRY.finditer(text)}
    for match in TABLE_ROW.finditer(text):
        cells = [cell.strip() for cell in match["cells"].split(" | ")]
        found[_page(match)] = cells[1]
    return found


def _page(match: re.Match) -> str:
    """The document a PAGE_LINK names, as a toctree names it."""
    return match["doc"] or match["file"]


def section_entries(docs: Path, section: str) -> list[Entry]:
    """A section's pages, each with its title, its path and its description from the section's index."""
    folder = docs / Path(section).parent
    index = docs / f"{section}.md"
    pages = toctree_pages(index)
    if pages is None:
        return []
    descriptions = index_descriptions(index)
    entries = []
    for page in pages:
        text = descriptions.get(page)
        if text is None:
            raise ValueError(f"{index.relative_to(docs.parent)}: {page} is in its toctree but has no entry saying what "
                             "it holds (`- [Title](" + page + ".md): ...` or a table row)")
        if LINK.search(text):
            raise ValueError(f"{index.relative_to(docs.parent)}: the entry of {page} links with a role or a link "
                             "relative to its index, which the README cannot show; say it in words")
        source = next(folder.glob(f"{page}.*"))
        entries.append(Entry(title(source), source.relative_to(docs.parent).as_posix(), text))
    return entries


def site_links(docs: Path) -> str:
    """Markdown: each section of the site linked by its title, with its pages and what each holds."""
    sections = toctree_pages(docs / "index.md") or []
    lines: list[str] = []
    for section in sections:
        index = docs / f"{section}.md"
        entries = section_entries(docs, section)
        lines.append(f"[{title(index)}]({index.relative_to(docs.parent).as_posix()})" + (":" if entries else ""))
        lines.append("")
        for entry in entries:
            lines.append(f"- [{entry.title}]({entry.path}): {entry.text}")
        if entries:
            lines.append("")
    return "\n".join(lines).rstrip("\n")
