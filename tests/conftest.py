"""Marks every test with its tier (unit, integration, image) from the folder it lives in, and moves
tests marked `untags_image` (they remove the built image's tags for a while) to the end of the run."""
from pathlib import Path

import pytest

TIERS = ("unit", "integration", "image")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(item.fspath).relative_to(Path(__file__).parent).parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
    items.sort(key=lambda item: item.get_closest_marker("untags_image") is not None)
