"""Rank side of `%%trainrun`: runs a notebook cell's code in a fresh namespace and returns the value of its last
expression, as a notebook does for the cell's Out[]."""
from __future__ import annotations

import ast
import linecache
from typing import Any, Mapping

# The name tracebacks give the cell's lines; linecache holds its source so they show the code.
CELL_FILENAME = "<trainrun cell>"


def compile_cell(source: str) -> tuple[Any, Any]:
    """The cell's statements, and its last expression separately (None if it ends in a statement); raises
    SyntaxError naming the cell's line."""
    tree = ast.parse(source, CELL_FILENAME)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    body = compile(tree, CELL_FILENAME, "exec")
    value = compile(ast.Expression(last.value), CELL_FILENAME, "eval") if last is not None else None
    return body, value


def run_cell(source: str, pushed: Mapping[str, Any]) -> Any:
    """Runs the cell as `__main__` code with the pushed notebook variables defined; returns its last
    expression's value. A rank's traceback starts at the cell's own line (the rank entry leaves out frames that
    set __tracebackhide__, as IPython and pytest do)."""
    __tracebackhide__ = True
    linecache.cache[CELL_FILENAME] = (len(source), None, source.splitlines(keepends=True), CELL_FILENAME)
    body, value = compile_cell(source)
    namespace = {"__name__": "__main__", **pushed}
    exec(body, namespace)
    return eval(value, namespace) if value is not None else None
