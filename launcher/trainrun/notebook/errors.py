"""The notebook's own errors (a `%%trainrun` line, a cell's syntax, `%%configure`): a TrainrunError whose message
alone, one line per problem, is what the cell shows (no traceback), and the cell counts as failed, so "Run All" stops
there. trainrun's other errors (a bad option, a failed job, whose rank's traceback is already in the cell's output)
reach the cell as they are, each shown as its one line."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import TrainrunError

if TYPE_CHECKING:
    from pooltemplates import TemplateError


class CellError(TrainrunError):
    @classmethod
    def from_template_error(cls, error: "TemplateError") -> "CellError":
        """A template's problems, each as the one line the CLI prints: `SUBJECT: field = value: rule (valid: ...)`."""
        return cls("\n".join(f"{error.subject}: {problem}" for problem in error.problems))

    def _render_traceback_(self) -> list[str]:
        return str(self).splitlines()
