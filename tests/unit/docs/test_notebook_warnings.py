"""The image tier fails a notebook whose cell shows one warning more often than once per rank and a reset or two
(tests/support/notebook_checks.py repeated_warnings): the DeepSpeed notebook's recorded page showed torch's
deprecation of two collectives 566 times, once per ZeRO-3 step and rank."""
import json
from pathlib import Path

from notebook_checks import WARNING_REPEATS, repeated_warnings

REPO = Path(__file__).resolve().parents[3]
WARNING = "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py:83: FutureWarning: deprecated"


def notebook_with(text: str) -> dict:
    return {"cells": [{"id": "train", "cell_type": "code", "outputs": [
        {"output_type": "stream", "name": "stderr", "text": text}]}]}


def test_a_warning_shown_at_every_step_is_named_with_its_count():
    text = (WARNING + "\n  return func(*args, **kwargs)\n") * 10
    assert repeated_warnings(notebook_with(text)) == {"train": {WARNING: 10}}


def test_a_warning_once_per_rank_and_rank_tagged_lines_pass():
    text = f"{WARNING}\n" * WARNING_REPEATS + "[0]<stderr>:x.py:1: UserWarning: a\n[1]<stderr>:x.py:1: UserWarning: a\n"
    assert repeated_warnings(notebook_with(text)) == {}


def test_no_recorded_page_shows_a_warning_over_the_limit():
    """databricks_deepspeed's page, recorded before images/patches/deepspeed-0.19.8-numa-count-once.patch, showed one
    FutureWarning 566 times (246 KB); its recording with the patch shows none over the limit."""
    refused = {path.stem for path in (REPO / "docs" / "notebooks").glob("*.ipynb")
               if repeated_warnings(json.loads(path.read_text(encoding="utf-8")))}
    assert refused == set()
