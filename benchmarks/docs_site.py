"""What the documentation site costs CI, measured in one run on this machine: the strict build from scratch and
again with Sphinx's environment kept, the docs' unit tests, the quickstarts' snippet tests and the browser check.

    python benchmarks/docs_site.py

Writes benchmarks/results/docs_site.json: the seconds of each step, the machine and its load average, and when.
Each step is the command CI runs (`invoke docs --check` builds; pytest runs the tests), timed from outside.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "docs_site.json"
BUILD_DIR = REPO / "docs" / "_build"
STEPS = {
    "strict build, cold (invoke docs --check)": [sys.executable, "-m", "invoke", "docs", "--check"],
    "strict build, warm (invoke docs --check)": [sys.executable, "-m", "invoke", "docs", "--check"],
    "unit tests (tests/unit/docs)": [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/unit/docs"],
    "snippet tests (tests/integration/test_docs_snippets.py)":
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/integration/test_docs_snippets.py"],
    "browser check (test_docs_site.py::test_the_site_in_chromium, site built)":
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/integration/test_docs_site.py::test_the_site_in_chromium"],
}


def main() -> None:
    shutil.rmtree(BUILD_DIR, ignore_errors=True)
    seconds = {}
    for name, command in STEPS.items():
        started = time.monotonic()
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        seconds[name] = round(time.monotonic() - started, 1)
        if done.returncode != 0:
            raise SystemExit(f"{name} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        print(f"{name}: {seconds[name]} s", flush=True)
    RESULTS.write_text(json.dumps({
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "load_average_after": [round(load, 2) for load in os.getloadavg()],
        "seconds": seconds,
        "note": "the browser check's step includes its own warm `invoke docs --check` build",
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
