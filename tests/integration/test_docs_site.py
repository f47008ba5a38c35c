"""The documentation site, built as CI builds it (`invoke docs --check`: no stale generated page, then sphinx-build
-W --keep-going -n, needing no docker and no network), refuses what it must refuse with the file and line, and is
looked at in Debian's chromium: the front page and a quickstart render, the search finds `%%configure` and
`--nproc-per-node`, and no page has a broken internal link, a missing anchor or a missing image. The screenshots are
left in tests/browser/results/ (site-*.png)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chromium import BROWSER_DIR, RESULTS_DIR, browser_node

from trainstack.docsite.build import DOCS_DIR, SITE_DIR, STRICT_OPTIONS, site_server

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = "quickstarts/synapse.html"
QUERIES = {"%%configure": "quickstarts/synapse.html", "--nproc-per-node": "reference/trainrun.html"}

pytestmark = pytest.mark.timeout(600)


def invoke(*args: str, timeout: int = 500) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def built_site() -> Path:
    started = time.monotonic()
    done = invoke("docs", "--check")
    print(f"invoke docs --check: {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, done.stdout + done.stderr
    return SITE_DIR


def test_the_strict_build_passes_with_every_page(built_site):
    assert "WARNING" not in built_site.joinpath("index.html").read_text(encoding="utf-8")
    sources = {path.relative_to(DOCS_DIR).with_suffix(".html") for path in DOCS_DIR.rglob("*")
               if path.suffix in (".md", ".ipynb") and "_build" not in path.parts}
    assert sources and all((built_site / page).is_file() for page in sources)


def test_a_broken_reference_and_a_page_outside_the_toctree_fail_with_file_and_line(tmp_path):
    source = tmp_path / "site"
    source.mkdir()
    (source / "index.md").write_text("# Home\n\nSee [the guide](guide.md) and {ref}`no-such-target`.\n\n"
                                     "```{toctree}\n:hidden:\n```\n")
    (source / "orphan.md").write_text("# Orphan\n")
    done = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", *STRICT_OPTIONS, "-c", str(DOCS_DIR),
                           str(source), str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert f"{source / 'index.md'}:3: WARNING: 'myst' cross-reference target not found: 'guide.md'" in done.stderr
    assert f"{source / 'index.md'}:3: WARNING: undefined label: 'no-such-target'" in done.stderr
    assert f"{source / 'orphan.md'}: WARNING: document isn't included in any toctree" in done.stderr


def test_serve_refuses_a_port_in_use():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = invoke("docs", "--serve", "--port", str(port), timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: --port = {port}: is not free on 127.0.0.1 (Address already in use) "
                                        "(valid: a free port, e.g. --port 0 for any)"]


def test_the_site_in_chromium(built_site):
    node = browser_node()
    RESULTS_DIR.mkdir(exist_ok=True)
    server = site_server(0, built_site)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        done = subprocess.run([node, str(BROWSER_DIR / "check_site.js"), f"http://127.0.0.1:{server.server_port}",
                               QUICKSTART, str(RESULTS_DIR), *QUERIES], capture_output=True, text=True, timeout=500,
                              cwd=BROWSER_DIR)
        print(f"check_site.js: {time.monotonic() - started:.1f} s")
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr[-4000:]
    site = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"pages: {site['pages']}; screenshots: {sorted(path.name for path in RESULTS_DIR.glob('site-*.png'))}")

    assert site["front"]["heading"].startswith("trainstack") and site["front"]["code_blocks"] >= 1
    assert site["quickstart"]["heading"].startswith("From Azure Synapse")
    assert site["quickstart"]["code_blocks"] >= 5 and site["quickstart"]["copy_buttons"] >= 5
    for query, page in QUERIES.items():
        assert any(found.endswith(page) for found in site["searches"][query]), (query, site["searches"][query])
    assert site["pages"] >= 30
    assert site["broken_links"] == [] and site["missing_anchors"] == [] and site["missing_images"] == []
    for name in ("site-front.png", "site-quickstart.png", "site-search-1.png", "site-search-2.png"):
        assert (RESULTS_DIR / name).stat().st_size > 10_000, name
