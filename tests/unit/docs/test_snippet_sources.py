"""No untested snippet in the quickstarts: a code block there is a `console` or `python` block, which
tests/integration/test_docs_snippets.py runs on the host, or a block `invoke docs` writes between markers from what
the tests run (trainstack/docsite/shown.py: a workflow of trainstack/image/workflows.py, the lab command, a cell of
examples/notebooks, a published-image step made from what the CI workflow publishes, code of an example a workflow
runs). A {literalinclude}, which GitHub shows as a box of its options, is refused like any directive that shows code."""
import re
from pathlib import Path

import pytest

from trainstack.docsite import shown

REPO = Path(__file__).resolve().parents[3]
QUICKSTARTS = sorted((REPO / "docs" / "quickstarts").glob("*.md"))
HOST_RUN = {"console", "python"}
SHOWN_KINDS = set(shown.KINDS)
# Directives that show code of their own (others, such as {note} or {toctree}, hold no snippet).
CODE_DIRECTIVES = {"{code-block}", "{code}", "{sourcecode}", "{code-cell}", "{include}", "{literalinclude}", "{raw}",
                   "{eval-rst}"}
FENCE = re.compile(r"^(?P<fence>```+|~~~+)(?P<info>[^\n]*)$", re.M)
# Blocks of a kind the host tests do not run, run as pasted by the tests that name the page: the Slurm quickstart's
# batch lines, on the loopback Slurm cluster.
RUN_BY = {("slurm", "bash"): ("tests/integration/test_slurm.py", "tests/image/test_slurm_pages.py")}


def blocks(text: str) -> list[tuple[int, str, str]]:
    """(line, kind, argument) of each top-level fenced block: its language or {directive}, and what follows it; a
    block between the markers of a shown block has the kind `shown:KIND`."""
    found, open_fence = [], None
    inside = _shown_lines(text)
    for match in FENCE.finditer(text):
        if open_fence is None:
            kind, _, argument = match["info"].strip().partition(" ")
            line = text.count("\n", 0, match.start()) + 1
            found.append((line, inside.get(line, kind), argument.strip()))
            open_fence = match["fence"]
        elif match["fence"] == open_fence and not match["info"].strip():
            open_fence = None
    return found


def _shown_lines(text: str) -> dict[int, str]:
    """Line -> `shown:KIND` for every line between a shown block's markers."""
    lines = {}
    for match in shown.MARKER.finditer(text):
        end = text.find(f"<!-- {match['marker']}:end -->", match.end())
        first, last = text.count("\n", 0, match.end()) + 1, text.count("\n", 0, end) + 1
        lines |= {line: f"shown:{match['kind']}" for line in range(first, last)}
    return lines


@pytest.mark.parametrize("page", QUICKSTARTS, ids=[page.stem for page in QUICKSTARTS])
def test_every_code_block_is_run_by_a_test(page):
    problems = []
    for line, kind, argument in blocks(page.read_text(encoding="utf-8")):
        where = f"{page.relative_to(REPO)}:{line}"
        if kind.startswith("shown:") or (page.stem, kind) in RUN_BY:
            continue
        if kind in CODE_DIRECTIVES or (not kind.startswith("{") and kind not in HOST_RUN):
            problems.append(f"{where}: a `{kind or 'plain'}` block, which no test runs")
    assert not problems, "\n".join(problems)


def test_quickstarts_show_each_kind():
    kinds = {kind for page in QUICKSTARTS for _, kind, _ in blocks(page.read_text(encoding="utf-8"))}
    assert HOST_RUN | {f"shown:{kind}" for kind in SHOWN_KINDS} <= kinds


def test_no_quickstart_shows_an_empty_directive_where_github_shows_nothing():
    """The commands and cells are in the Markdown itself: no {workflow}, {lab-command}, {notebook-cell} or
    {published-image} directive, which GitHub shows as an empty box."""
    directives = {f"{{{kind}}}" for kind in SHOWN_KINDS}
    found = [f"{page.relative_to(REPO)}:{line}: {kind}" for page in QUICKSTARTS
             for line, kind, _ in blocks(page.read_text(encoding="utf-8")) if kind in directives]
    assert found == []


def test_blocks_are_found_with_their_line():
    text = "# t\n\n```console\n$ ls\n```\n\n````{note}\n```python\nx\n```\n````\n"
    assert blocks(text) == [(3, "console", ""), (7, "{note}", "")]
    marked = "<!-- lab-command:start -->\n```shell-session\n$ docker run\n```\n<!-- lab-command:end -->\n"
    assert blocks(marked) == [(2, "shown:lab-command", "")]


@pytest.mark.parametrize("page,kind", sorted(RUN_BY))
def test_the_tests_that_run_a_pages_blocks_read_that_page(page, kind):
    for test in RUN_BY[page, kind]:
        assert f"quickstarts/{page}.md" in (REPO / test).read_text(encoding="utf-8"), test
