"""`invoke docs`: the documentation site in docs/, its generated pages regenerated and then built strictly."""
from __future__ import annotations

from pathlib import Path

from invoke import task

from trainstack.console import report, reports_errors
from trainstack.errors import TrainstackError, bad_value, whole_number


def _port(text: str) -> int:
    port = whole_number("--port", text, minimum=0)
    if port > 65535:
        raise bad_value("--port", text, "is not a TCP port", "a whole number from 0 to 65535 (0: any free port)")
    return port


@task(help={
    "check": "write nothing: fail on a stale generated page (file and line), then build (what CI runs)",
    "serve": "then serve the site on 127.0.0.1 until Ctrl-C",
    "port": "the port --serve listens on (default 8000; 0: any free port)",
    "executed-notebooks": "first copy the executed notebooks the image tier recorded in this folder "
                          "(tests/image/results/notebooks) into docs/notebooks/",
})
@reports_errors
def docs(c, check=False, serve=False, port="8000", executed_notebooks=None):
    """Regenerate every generated page and table, then build the site strictly (-W --keep-going -n) to
    docs/_build/html.

    A broken cross-reference, a page missing from the table of contents or a stale generated page (--check) fails
    the build, naming the file and line.
    """
    from trainstack.docsite import build, notebooks, pages

    server = build.site_server(_port(port)) if serve else None
    if executed_notebooks is not None:
        folder = Path(executed_notebooks)
        if not folder.is_dir():
            raise bad_value("--executed-notebooks", executed_notebooks, "is not a folder",
                            "the folder tests/image/test_notebooks.py records its runs in, tests/image/results/notebooks")
        try:
            written = notebooks.write_pages(folder, pages.REPO_ROOT / "examples" / "notebooks",
                                            build.DOCS_DIR / "notebooks")
        except ValueError as exc:
            raise TrainstackError(str(exc)) from None
        for path in written:
            report(f"notebook page {path.relative_to(pages.REPO_ROOT)} from {folder}")
    try:
        if check:
            stale = pages.stale()
            if stale:
                lines = "\n".join(f"  {page}" for page in stale)
                raise TrainstackError(f"{len(stale)} generated file(s) stale:\n{lines}")
        else:
            for path in pages.write():
                report(f"regenerated {path}")
    except ValueError as exc:  # a page lost its markers
        raise TrainstackError(str(exc)) from None
    report(f"building the site: sphinx-build {' '.join(build.STRICT_OPTIONS)} docs {build.SITE_DIR}")
    if build.build_site() != 0:
        raise TrainstackError("the docs build failed: the warnings above name each file and line")
    report(f"built {build.SITE_DIR / 'index.html'}")
    if server is not None:
        host, bound = server.server_address[:2]
        print(f"serving http://{host}:{bound}/ (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
