"""Marks every test with its tier (unit, integration, image) from the folder it lives in, skips the tests marked
`long` unless TRAINSTACK_LONG=1 (`invoke test --long`), and moves tests marked `untags_image` (they remove the
built image's tags for a while) to the end of the run. Also the one golden-file fixture every tier uses."""
import os
from pathlib import Path
from typing import Callable

import pytest

TIERS = ("unit", "integration", "image")
# Horovod's own suites, run inside the image by tests/image/test_upstream_horovod.py, never on the host.
collect_ignore = ["upstream"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(item.fspath).relative_to(Path(__file__).parent).parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
        if item.get_closest_marker("long") and os.environ.get("TRAINSTACK_LONG") != "1":
            item.add_marker(pytest.mark.skip(reason="a long test: `invoke test --long` runs it"))
    items.sort(key=lambda item: item.get_closest_marker("untags_image") is not None)


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """Compares text with the file NAME under the test module's golden/ folder.

    After an intended change, `UPDATE_GOLDEN=1 pytest ...` rewrites the files; review their diff.
    """
    folder = Path(request.path).parent / "golden"

    def compare(name: str, text: str) -> None:
        path = folder / name
        if os.environ.get("UPDATE_GOLDEN") == "1":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        assert text == path.read_text(encoding="utf-8"), f"{path} differs; review and regenerate with UPDATE_GOLDEN=1"

    return compare
