from pathlib import Path
from typing import Callable

import pytest


@pytest.fixture
def write_template(tmp_path: Path) -> Callable[[str, str], Path]:
    """Writes a template YAML file into a temporary folder and returns its path."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(text, encoding="utf-8")
        return path

    return write
