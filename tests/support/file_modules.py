"""The files the image runs that are no module of this repository's packages (images/scripts/, the site hooks in
images/site-packages/), loaded as modules for tests to call."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_file_module(path: Path) -> ModuleType:
    """The Python file at `path`, executed as a module named after it (not added to sys.modules), with its folder
    first on sys.path as when it runs as a script, so that it imports its neighbours as it does in the image."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module
