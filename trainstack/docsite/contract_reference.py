"""The in-image contract's reference: the paths, ports and names a module of constants declares (each with the
comment above it), the environment the image sets, and the roles its entrypoint takes."""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from types import ModuleType

from trainstack.image.docs import markdown_table

ENTRYPOINT_ROLE = re.compile(r"^    ([a-z][a-z-]*)\)$", re.M)


def constants_table(module: ModuleType) -> str:
    """One row per module-level UPPER_CASE constant: its name, value and the comment lines just above it."""
    source = inspect.getsource(module)
    lines = source.splitlines()
    rows = []
    for node in ast.parse(source).body:
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, ast.AnnAssign) else [])
        for target in targets:
            if isinstance(target, ast.Name) and target.id.isupper():
                comment = []
                index = node.lineno - 2
                while index >= 0 and lines[index].startswith("#"):
                    comment.insert(0, lines[index].lstrip("# ").strip())
                    index -= 1
                value = getattr(module, target.id)
                shown = (", ".join(f"{key}: `{item}`" for key, item in value.items()) if isinstance(value, dict)
                         else f"`{value}`")
                rows.append([f"`{target.id}`", shown, " ".join(comment)])
    return markdown_table(["name", "value", "what it is"], rows)


def environment_table(environment: dict[str, str]) -> str:
    return markdown_table(["variable", "value"], [[f"`{name}`", f"`{value}`"] for name, value in environment.items()])


def entrypoint_roles(script: Path) -> tuple[list[str], str]:
    """The first arguments the entrypoint script takes as roles (its `case` arms), and its header comment."""
    text = script.read_text(encoding="utf-8")
    comment = []
    for line in text.splitlines()[1:]:  # after the #! line
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("#").strip())
    return ENTRYPOINT_ROLE.findall(text), " ".join(comment)
