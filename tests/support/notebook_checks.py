"""What an executed seed notebook (examples/notebooks) must show: the notebooks' image test runs them in a lone
container, the pool's test runs the Synapse one on a pool's notebook. Both execute them with
tests/image/units/run_notebook.py, which prints the executed notebook after MARKER."""
from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass

from workflow_checks import checkpoint_writers

MARKER = "EXECUTED NOTEBOOK:"
EPOCH_LOSS = re.compile(r"epoch (\d+) loss ([0-9.]+)")
ACCURACY = re.compile(r"accuracy:? ([0-9.]+)")


@dataclass(frozen=True)
class Training:
    """One distributed run a notebook makes, and the cells (by id) whose outputs show it."""

    cells: tuple[str, ...]
    rank_output: tuple[str, ...]  # what rank 0's and rank 1's output shows in the cells, tag and all
    writes_checkpoint: bool = True
    learns: bool = True  # its loss falls and its accuracy reaches 0.9


# horovod.spark tags its ranks' lines [N]<stdout>: and [N]<stderr>: (Keras prints its progress on rank 0 only); the
# estimators' world-size metric, averaged over the ranks, is 2.
ESTIMATOR_RANKS = ("[0]<std", "[1]<std", "ranks that trained: 2")

NOTEBOOKS = {
    "synapse_torch_estimator": [
        Training(("check-ranks",), ("[1,0]<stdout>:rank 0 of 2: allreduce sum 3",
                                    "[1,1]<stdout>:rank 1 of 2: allreduce sum 3"), writes_checkpoint=False, learns=False),
        Training(("fit", "history", "checkpoint", "evaluate"), ESTIMATOR_RANKS),
    ],
    "databricks_horovod": [
        Training(("horovod-runner",), ("[1,0]<stdout>:rank 0 of 2", "[1,1]<stdout>:rank 1 of 2")),
        Training(("fit", "history", "evaluate"), ESTIMATOR_RANKS),
    ],
    "torch_distributor": [
        Training(("run-function",), ("rank 0 of 2", "rank 1 of 2"), writes_checkpoint=False),
        Training(("run-script",), ("rank 0 of 2", "rank 1 of 2")),
    ],
    "databricks_deepspeed": [
        Training(("run-function",), ("rank 0 of 2", "rank 1 of 2")),
        Training(("run-script",), ("rank 0 of 2", "rank 1 of 2")),
    ],
    "ml_platform_mpirun": [
        Training(("mpirun",), ("[1,0]<stdout>:rank 0 of 2", "[1,1]<stdout>:rank 1 of 2")),
        Training(("trainrun", "accuracy"), ("[1,0]<stdout>:rank 0 of 2", "[1,1]<stdout>:rank 1 of 2")),
    ],
}


def shown(cell: dict) -> str:
    """What a saved cell shows: its streams, its result and its error."""
    parts = []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream":
            parts.append("".join(output["text"]))
        elif output["output_type"] == "error":
            parts.append(f"{output['ename']}: {output['evalue']}\n")
        elif "text/plain" in output.get("data", {}):
            parts.append("".join(output["data"]["text/plain"]) + "\n")
    return "".join(parts)


# A JVM stack frame, or the count of frames it left out, in the message of an error Spark raised through Py4J.
JVM_FRAME = re.compile(r"^\s*(at |\.\.\. \d+ more)")


def failure_shown(cell: dict) -> str:
    """A failed cell as a failing test reports it: what it showed, less the JVM's frames, which would push the
    ranks' output and Python's own traceback out of the report."""
    return "\n".join(line for line in shown(cell).splitlines() if not JVM_FRAME.match(line))


def executed_notebook(status: int, output: str) -> dict:
    """The notebook run_notebook.py printed, asserting it ran with no cell failing."""
    saved = [line for line in output.splitlines() if line.startswith(MARKER)]
    assert saved, f"exit {status}, no executed notebook; output:\n{output[-4000:]}"
    notebook = json.loads(saved[-1][len(MARKER):])
    errors = {cell["id"]: failure_shown(cell)[-6000:] for cell in notebook["cells"]
              if any(o["output_type"] == "error" for o in cell.get("outputs", []))}
    assert status == 0 and not errors, f"exit {status}; cells that failed: {errors}\n{output[-3000:]}"
    return notebook


# A warning as Python's warnings module prints it (`FILE:LINE: CATEGORY: message`), a rank's tag before it or not.
WARNING_LINE = re.compile(r"^\S+:\d+: \w*Warning: ")
# How often a cell may show one warning line: once per rank (2), and once more each where a library resets Python's
# record of the warnings already shown, as DeepSpeed's CPU accelerator does once per process
# (images/patches/deepspeed-0.19.8-numa-count-once.patch; before it, at every training step).
WARNING_REPEATS = 4


def repeated_warnings(notebook: dict, limit: int = WARNING_REPEATS) -> dict[str, dict[str, int]]:
    """{cell id: {warning line: times shown}} of the warning lines a code cell shows more than `limit` times."""
    found = {}
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        counts: dict[str, int] = {}
        for line in shown(cell).splitlines():
            if WARNING_LINE.match(line):
                counts[line] = counts.get(line, 0) + 1
        repeated = {line: count for line, count in counts.items() if count > limit}
        if repeated:
            found[cell["id"]] = repeated
    return found


# The largest plot a notebook page may carry, as the PNG Jupyter saves (base64 in the page): a loss curve is 20 to
# 30 KB at 5 x 3 inches.
MAX_PLOT_BYTES = 100_000


def plots(notebook: dict) -> dict[str, int]:
    """{cell id: bytes of the PNG image it shows} of the code cells that show one (matplotlib's inline figures)."""
    return {cell["id"]: len(base64.b64decode("".join(output["data"]["image/png"])))
            for cell in notebook["cells"] if cell["cell_type"] == "code"
            for output in cell.get("outputs", []) if "image/png" in output.get("data", {})}


# Notebooks whose successful run shows no traceback or exception in any cell: Synapse's TorchEstimator tutorial, whose
# evaluation cells showed PySpark daemon's BrokenPipeError (images/patches/pyspark-4.3.0-daemon-closed-reader.patch).
NO_TRACEBACK_NOTEBOOKS = ("synapse_torch_estimator",)


def no_traceback(output: str) -> list[str]:
    """The lines of a successful run's output that show a traceback or an exception."""
    return [line for line in output.splitlines() if "Traceback" in line or "Exception" in line]


def check_trainings(name: str, notebook: dict) -> None:
    """Every code cell ran; in each of the notebook's trainings both ranks' output is in its cells, the loss fell,
    the accuracy is at least 0.9 and rank 0 alone wrote the checkpoint (where it learns and writes one); a notebook
    of NO_TRACEBACK_NOTEBOOKS shows no traceback and no exception anywhere."""
    cells = {cell["id"]: shown(cell) for cell in notebook["cells"] if cell["cell_type"] == "code"}
    assert all(cell.get("execution_count") for cell in notebook["cells"] if cell["cell_type"] == "code")
    if name in NO_TRACEBACK_NOTEBOOKS:
        assert no_traceback("".join(cells.values())) == [], name
    for training in NOTEBOOKS[name]:
        text = "".join(cells[cell_id] for cell_id in training.cells)
        for line in training.rank_output:
            assert line in text, f"{training.cells}: {line!r} is not in the cells:\n{text[-3000:]}"
        if not training.learns:
            continue
        losses = [float(loss) for _, loss in EPOCH_LOSS.findall(text)]
        assert len(losses) >= 2 and losses[-1] < losses[0] / 2, f"{training.cells}: loss did not fall:\n{text[-3000:]}"
        accuracies = [float(accuracy) for accuracy in ACCURACY.findall(text)]
        assert accuracies and accuracies[-1] >= 0.9, f"{training.cells}: accuracy below 0.9:\n{text[-3000:]}"
        if training.writes_checkpoint:
            assert set(checkpoint_writers(text)) == {"rank 0"}, f"{training.cells}: checkpoint writers:\n{text[-3000:]}"
