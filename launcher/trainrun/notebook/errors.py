"""The one error a trainrun cell shows: its message alone, no traceback (a failing rank's traceback is already in
the cell's output), and the cell counts as failed, so "Run All" stops there."""


class CellError(Exception):
    def _render_traceback_(self) -> list[str]:
        return [str(self)]
