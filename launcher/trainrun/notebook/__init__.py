"""trainrun's IPython extension: `%%trainrun` cells across ranks, `%%configure` for the Spark session, and a
predefined `spark`. Every kernel of the trainstack images loads it; elsewhere `%load_ext trainrun.notebook`."""
from __future__ import annotations

from typing import Any


def load_ipython_extension(shell: Any) -> None:
    from .magics import TrainrunMagics

    shell.register_magics(TrainrunMagics(shell))
