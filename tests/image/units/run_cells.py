"""Runs the cells given as a JSON list, headless in the image's own kernel (nbclient, the python3 kernel), every one
of them even after one fails; prints a JSON list of each cell's outputs as Jupyter saves them.

    python run_cells.py '["cell one", "cell two"]'
"""
import json
import sys

import nbclient
import nbformat

notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in json.loads(sys.argv[1])])
nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3", allow_errors=True).execute()
print(json.dumps([cell.outputs for cell in notebook.cells]), flush=True)
