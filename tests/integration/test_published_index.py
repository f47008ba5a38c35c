"""The published-version check against a real HTTP simple index on 127.0.0.1 (JSON for most projects, the
HTML page for torch), and against an index that refuses connections."""
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest
from packaging.utils import canonicalize_name

from trainstack.errors import TrainstackError
from trainstack.image import published
from trainstack.image.matrix import load_matrix
from trainstack.image.published import check_published, pinned_packages
from trainstack.image.sources import SourceOptions

pytestmark = pytest.mark.timeout(60)

TORCH_VERSIONS = ["2.10.0", "2.11.0", "2.12.0", "2.13.0"]


class SimpleIndex(BaseHTTPRequestHandler):
    """GET /simple/PROJECT/: PEP 691 JSON when asked for it, except torch's PEP 503 HTML page; 404 otherwise."""

    projects: dict[str, list[str]] = {}

    def do_GET(self) -> None:
        project = self.path.removeprefix("/simple/").strip("/")
        versions = self.projects.get(project)
        if versions is None:
            self.send_error(404)
            return
        wheels = [f"{project.replace('-', '_')}-{version}-py3-none-any.whl" for version in versions]
        if project != "torch" and "application/vnd.pypi.simple.v1+json" in self.headers["Accept"]:
            content_type = "application/vnd.pypi.simple.v1+json"
            body = json.dumps({"meta": {"api-version": "1.0"}, "name": project,
                               "files": [{"filename": wheel, "url": f"/files/{wheel}", "hashes": {}}
                                         for wheel in wheels]}).encode()
        else:
            content_type = "text/html"
            body = ("<html><body>" + "".join(f'<a href="/files/{wheel}#sha256=00">{wheel}</a><br/>'
                                             for wheel in wheels) + "</body></html>").encode()
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def cpu():
    return load_matrix().flavor("cpu")


@pytest.fixture
def index(cpu, monkeypatch) -> Iterator[str]:
    """The URL of a simple index listing every pin of the cpu flavor, torch with TORCH_VERSIONS."""
    monkeypatch.delenv(published.SKIP_ENV, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    projects = {canonicalize_name(pin.project): [pin.version] for pin in pinned_packages(cpu)}
    monkeypatch.setattr(SimpleIndex, "projects", {**projects, "torch": TORCH_VERSIONS})
    server = ThreadingHTTPServer(("127.0.0.1", 0), SimpleIndex)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()
    server.server_close()


@pytest.fixture
def refusing_index() -> str:
    """An index URL on a loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/simple"


def test_published_versions_pass(index, capsys):
    check_published(load_matrix().flavor("cpu", {"torch": "2.12.0"}),
                    SourceOptions(index_url=index, extra_index_urls=[index]))
    assert capsys.readouterr().err == ""


def test_an_unpublished_version_is_refused_naming_field_value_and_valid_versions(index):
    with pytest.raises(TrainstackError) as raised:
        check_published(load_matrix().flavor("cpu", {"torch": "99.0.0"}),
                        SourceOptions(index_url=index, extra_index_urls=[index]))
    assert str(raised.value) == (f"torch.version = '99.0.0': is not a published version of torch on {index} "
                                 f"(valid: {', '.join(TORCH_VERSIONS)}; nearest of 4 published)")


def test_an_unreachable_index_warns_and_passes(index, refusing_index, capsys):
    check_published(load_matrix().flavor("cpu", {"torch": "99.0.0"}),
                    SourceOptions(index_url=index, extra_index_urls=[refusing_index]))
    [warning] = capsys.readouterr().err.splitlines()
    assert warning.startswith("warning: could not check that these pins are published")
    assert f"torch==99.0.0 ({refusing_index}: no answer (" in warning
