"""Runs cells headless in the image's own kernel (nbclient, the python3 kernel), as a notebook would, and gives what
each cell showed: its streams, results and errors, as text."""
import nbclient
import nbformat


def shown(cell) -> str:
    parts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}")
        elif "data" in output:
            parts.append(output.data.get("text/plain", ""))
    return "".join(parts)


def run_cells(sources: list[str], timeout: int = 600) -> list[str]:
    """Runs the cells in one kernel, going on after a failing cell; what each showed."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in sources])
    nbclient.NotebookClient(notebook, timeout=timeout, allow_errors=True, kernel_name="python3").execute()
    return [shown(cell) for cell in notebook.cells]
