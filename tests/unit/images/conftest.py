import os
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"


@pytest.fixture
def golden():
    """Compares text with a golden file; UPDATE_GOLDEN=1 rewrites the file instead."""

    def compare(name: str, text: str) -> None:
        path = GOLDEN_DIR / name
        if os.environ.get("UPDATE_GOLDEN") == "1":
            path.write_text(text)
        assert text == path.read_text(), f"{name} differs; review and regenerate with UPDATE_GOLDEN=1"

    return compare
