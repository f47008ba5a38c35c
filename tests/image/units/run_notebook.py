"""Executes a notebook headless as Jupyter would (nbclient, the python3 kernel), in a folder of its own.

    python run_notebook.py NOTEBOOK WORKDIR [CELL_TIMEOUT]

The notebook is copied to WORKDIR (unless it is there already), which the kernel runs in (its %%writefile and checkpoints land there). The
executed notebook, outputs and all, is printed after a line `EXECUTED NOTEBOOK:` as one line of JSON, also when a
cell failed (the exit code is then 1), with the seconds it took.
"""
import json
import shutil
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellControlSignal, CellExecutionError, DeadKernelError

MARKER = "EXECUTED NOTEBOOK:"


def main() -> int:
    source, workdir = Path(sys.argv[1]), Path(sys.argv[2])
    cell_timeout = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    workdir.mkdir(parents=True, exist_ok=True)
    copy = workdir / source.name
    if copy.resolve() != source.resolve():  # else it runs where it is, as JupyterLab runs a notebook it opened
        shutil.copyfile(source, copy)
    notebook = nbformat.read(copy, as_version=4)
    client = NotebookClient(notebook, timeout=cell_timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(workdir)}})
    started = time.monotonic()
    status = 0
    try:
        client.execute()
    except (CellExecutionError, CellControlSignal, DeadKernelError) as exc:  # a failed, timed-out or dead cell
        print(exc, file=sys.stderr, flush=True)
        status = 1
    notebook.metadata["trainstack_seconds"] = round(time.monotonic() - started, 1)
    nbformat.write(notebook, copy)
    print(MARKER, json.dumps(notebook), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
