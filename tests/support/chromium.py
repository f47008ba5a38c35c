"""What the browser tests drive: Debian's chromium through npm's playwright-core in tests/browser/ (`./dev setup`
installs both; no browser is ever downloaded). Their screenshots go to tests/browser/results/."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

BROWSER_DIR = Path(__file__).parents[1] / "browser"
RESULTS_DIR = BROWSER_DIR / "results"
CHROMIUM = "/usr/bin/chromium"


def browser_node() -> str:
    """The node that runs the browser scripts; the test fails, saying what to install, where a piece is missing."""
    node = shutil.which("node")
    if node is None or not Path(CHROMIUM).exists() or not (BROWSER_DIR / "node_modules" / "playwright-core").is_dir():
        pytest.fail("chromium, node or playwright-core is missing: run `./dev setup` (it installs chromium and "
                    "`npm ci` in tests/browser)")
    return node
