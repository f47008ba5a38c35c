"""The quickstarts' code blocks (and the error catalogue's examples) run on this host as the pages show them
(sybil): every `console` block's commands in one bash, each command's output compared with the page's (`...` matches anything, whitespace is normalized), a
command that fails only where the page shows its `echo $?`; every `python` block in one namespace per page, a
`>>>` block as a doctest. What cannot run on a host is a {workflow}, {notebook-cell} or {literalinclude} of an
example, which the image tier runs (tests/unit/docs/test_snippet_sources.py holds the pages to that)."""
from __future__ import annotations

import doctest
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from sybil import Example, Sybil
from sybil.parsers.myst import CodeBlockParser, PythonCodeBlockParser

from trainstack.docsite.shown import prompt_commands

REPO = Path(__file__).resolve().parents[2]
# The quickstarts, and the error catalogue's examples of messages.
PAGES = [*sorted((REPO / "docs" / "quickstarts").glob("*.md")), REPO / "docs" / "reference" / "errors.md"]
CHECKER = doctest.OutputChecker()
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

pytestmark = pytest.mark.timeout(600)


def run_console(example: Example) -> None:
    pairs = prompt_commands(example.parsed)
    marker = f"--- {uuid.uuid4().hex} ---"
    # Each command's stderr joins its stdout in order, and its exit code follows it behind a marker line
    # (kept in $? for the next command, which may be the page's `echo $?`).
    script = "".join(f"{{ {command}\n}} 2>&1\ncode=$?\nprintf '\\n{marker} %d\\n' $code\n(exit $code)\n"
                     for command, _ in pairs)
    done = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "120", "NO_COLOR": "1"})
    parts = done.stdout.split(marker)
    outputs, codes = [parts[0]], []
    for part in parts[1:]:
        code, _, rest = part.lstrip(" ").partition("\n")
        codes.append(int(code))
        outputs.append(rest)
    for index, (command, expected) in enumerate(pairs):
        got = outputs[index].strip("\n") + "\n"
        shown_next = index + 1 < len(pairs) and pairs[index + 1][0].strip() == "echo $?"
        where = f"{example.path}:{example.line}: `{command}`"
        assert codes[index] == 0 or shown_next, f"{where} exited {codes[index]}:\n{got}{done.stderr}"
        if expected.strip():
            assert CHECKER.check_output(expected, got, FLAGS), f"{where} printed\n{got}\nthe page shows\n{expected}"


SYBIL = Sybil(parsers=[CodeBlockParser(language="console", evaluator=run_console),
                       PythonCodeBlockParser(doctest_optionflags=FLAGS)],
              path=str(REPO / "docs"), pattern="*.md")


@pytest.mark.parametrize("page", PAGES, ids=[page.stem for page in PAGES])
def test_quickstart_blocks_run_as_shown(page: Path) -> None:
    document = SYBIL.parse(page)
    for example in document:
        example.evaluate()
