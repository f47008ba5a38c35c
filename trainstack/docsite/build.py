"""The strict build of the site (`sphinx-build -W --keep-going -n`: every warning, a broken cross-reference or a
page outside the table of contents among them, fails it, each named by file and line) and a local server for a
look at the result."""
from __future__ import annotations

import functools
import subprocess
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from trainstack.errors import bad_value

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS_DIR = REPO_ROOT / "docs"
SITE_DIR = DOCS_DIR / "_build" / "html"
STRICT_OPTIONS = ("-W", "--keep-going", "-n")


def build_site(source: Path = DOCS_DIR, out: Path = SITE_DIR, config_dir: Path | None = None) -> int:
    """Runs the strict HTML build; its warnings go to stderr. Returns sphinx-build's exit code (0: no warning)."""
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", *STRICT_OPTIONS, str(source), str(out)]
    if config_dir is not None:
        command[4:4] = ["-c", str(config_dir)]
    return subprocess.run(command, cwd=REPO_ROOT).returncode


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # one line per request is noise here
        pass


def site_server(port: int, directory: Path = SITE_DIR) -> ThreadingHTTPServer:
    """A server for the built site on 127.0.0.1:port, bound now (a port in use is refused before any build)."""
    try:
        return ThreadingHTTPServer(("127.0.0.1", port), functools.partial(_QuietHandler, directory=str(directory)))
    except OSError as exc:
        raise bad_value("--port", port, f"is not free on 127.0.0.1 ({exc.strerror})",
                        "a free port, e.g. --port 0 for any") from None
