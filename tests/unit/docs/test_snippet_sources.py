"""No untested snippet in the quickstarts: a code block there is a `console` or `python` block, which
tests/integration/test_docs_snippets.py runs on the host, or comes from what the image tier runs: a {workflow}
(trainstack/image/workflows.py), a {lab-command}, a {notebook-cell} of examples/notebooks, or a {literalinclude} of
an example a workflow runs; or it gets a published image, a {published-image} command made from what the CI
workflow publishes (tests/unit/docs/test_published_images.py holds them to it)."""
import re
from pathlib import Path

import pytest

from trainstack.image.workflows import WORKFLOWS

REPO = Path(__file__).resolve().parents[3]
QUICKSTARTS = sorted((REPO / "docs" / "quickstarts").glob("*.md"))
HOST_RUN = {"console", "python"}
FROM_THE_IMAGE_TIER = {"{workflow}", "{lab-command}", "{notebook-cell}", "{literalinclude}"}
FROM_THE_CI_WORKFLOW = {"{published-image}"}
# Directives that show code of their own (others, such as {note} or {toctree}, hold no snippet).
CODE_DIRECTIVES = {"{code-block}", "{code}", "{sourcecode}", "{code-cell}", "{include}", "{raw}", "{eval-rst}"}
FENCE = re.compile(r"^(?P<fence>```+|~~~+)(?P<info>[^\n]*)$", re.M)


def blocks(text: str) -> list[tuple[int, str, str]]:
    """(line, kind, argument) of each top-level fenced block: its language or {directive}, and what follows it."""
    found, open_fence = [], None
    for match in FENCE.finditer(text):
        if open_fence is None:
            kind, _, argument = match["info"].strip().partition(" ")
            found.append((text.count("\n", 0, match.start()) + 1, kind, argument.strip()))
            open_fence = match["fence"]
        elif match["fence"] == open_fence and not match["info"].strip():
            open_fence = None
    return found


def example_scripts() -> set[str]:
    return {Path(part).name for workflow in WORKFLOWS for part in workflow.command if part.endswith(".py")}


@pytest.mark.parametrize("page", QUICKSTARTS, ids=[page.stem for page in QUICKSTARTS])
def test_every_code_block_is_run_by_a_test(page):
    problems = []
    for line, kind, argument in blocks(page.read_text(encoding="utf-8")):
        where = f"{page.relative_to(REPO)}:{line}"
        if kind in CODE_DIRECTIVES or (not kind.startswith("{") and kind not in HOST_RUN):
            problems.append(f"{where}: a `{kind or 'plain'}` block, which no test runs")
        elif kind == "{literalinclude}" and Path(argument).name not in example_scripts():
            problems.append(f"{where}: {argument} is not an example a workflow runs ({sorted(example_scripts())})")
    assert not problems, "\n".join(problems)


def test_quickstarts_show_each_kind():
    kinds = {kind for page in QUICKSTARTS for _, kind, _ in blocks(page.read_text(encoding="utf-8"))}
    assert HOST_RUN | FROM_THE_IMAGE_TIER | FROM_THE_CI_WORKFLOW <= kinds


def test_blocks_are_found_with_their_line():
    text = "# t\n\n```console\n$ ls\n```\n\n````{note}\n```python\nx\n```\n````\n"
    assert blocks(text) == [(3, "console", ""), (7, "{note}", "")]
