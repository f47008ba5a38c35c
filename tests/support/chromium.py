"""What the browser tests drive: Debian's chromium through npm's playwright-core in tests/browser/ (`./dev setup`
installs both; no browser is ever downloaded). Their screenshots go to tests/browser/results/."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
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


def drive_chromium(browser_tools: str, container, script: str, *args: str, timeout: int = 900) -> dict:
    """Runs tests/browser/SCRIPT against a server in `container` (the browser's own deadline 5 minutes inside
    `timeout`); asserts it succeeded, with the container's log when it did not; returns the page facts it printed
    last, as JSON."""
    finished = subprocess.run(
        [browser_tools, str(BROWSER_DIR / script), *args], capture_output=True, text=True, timeout=timeout,
        cwd=BROWSER_DIR, env={**os.environ, "BROWSER_TIMEOUT_MS": str((timeout - 300) * 1000)})
    assert finished.returncode == 0, finished.stderr[-4000:] + container.logs().decode(errors="replace")[-3000:]
    return json.loads(finished.stdout.strip().splitlines()[-1])
