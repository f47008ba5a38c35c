"""The code maps of docs/reference/layout.md: indented trees of a folder's entries, one line each with what it
holds. A map must name every folder and Python module under its root (to its depth) and nothing that is not
there, so a new module or folder without a line fails the check (a unit test and the docs build run it).

    trainstack/                 the root folder, then its entries two spaces further in
      errors.py                 what it holds, continued on lines indented to this column
      image/
        matrix.py               ...
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ENTRY = re.compile(r"^(?P<indent> *)(?P<name>\S+)(?P<gap> {2,}|$)")
# Inside a distribution's package only the code is mapped: its folders and .py modules (data files may be named).
CODE_SUFFIX = ".py"
UNMAPPED = {"__init__.py", "__main__.py"}


@dataclass(frozen=True)
class MapLine:
    line: int  # 0-based, within the map's text
    path: str  # relative to the repository, folders ending with /


def parse_map(text: str, root: str) -> list[MapLine]:
    """The entries a map names, as repository paths. `root` is the folder the map's first line names ("." for the
    repository's top level, whose entries start at column 0)."""
    base = "" if root == "." else str(PurePosixPath(root).parent).removeprefix(".") + "/"
    base = base.lstrip("/")
    entries: list[MapLine] = []
    folders: list[tuple[int, str]] = []  # the open folders: (indent, path)
    description_column = None
    for number, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if description_column is not None and indent >= description_column:
            continue  # a description's continuation
        match = ENTRY.match(line)
        if match is None:
            raise ValueError(f"line {number + 1}: {line.strip()!r} is neither an entry nor a description")
        while folders and folders[-1][0] >= indent:
            folders.pop()
        path = (folders[-1][1] if folders else base) + match["name"]
        entries.append(MapLine(number, path))
        description_column = match.end("gap") if match["gap"] else None
        if path.endswith("/"):
            folders.append((indent, path))
    return entries


def repository_files(repo: Path) -> list[str]:
    """Every file git tracks or would track (untracked but not ignored), relative to the repository."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=repo,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    return [path for path in listed if (repo / path).exists()]


def expected_entries(files: list[str], root: str, depth: int | None) -> set[str]:
    """What a map of `root` must name: its top entries for ".", else every folder and .py module under it."""
    if root == ".":
        return {path.split("/")[0] + ("/" if "/" in path else "") for path in files}
    expected = {root.rstrip("/") + "/"}
    for path in files:
        if not path.startswith(root.rstrip("/") + "/"):
            continue
        parts = PurePosixPath(path).relative_to(root).parts
        for level in range(1, len(parts)):
            if depth is None or level <= depth:
                expected.add(f"{root}/{'/'.join(parts[:level])}/")
        if path.endswith(CODE_SUFFIX) and parts[-1] not in UNMAPPED and (depth is None or len(parts) <= depth):
            expected.add(path)
    return expected


def map_problems(text: str, root: str, files: list[str], depth: int | None = None) -> list[tuple[int, str]]:
    """(line, problem) for each entry the map lacks (line 0: its first) and each entry it names that is not there."""
    try:
        entries = parse_map(text, root)
    except ValueError as exc:
        return [(0, str(exc))]
    named = {entry.path for entry in entries}
    present = {path for path in files} | {f"{'/'.join(PurePosixPath(path).parts[:n])}/"
                                           for path in files for n in range(1, len(PurePosixPath(path).parts))}
    problems = [(0, f"{path} has no line in the map of {root}") for path in sorted(expected_entries(files, root, depth)
                                                                                      - named)]
    problems += [(entry.line, f"{entry.path} is named but does not exist") for entry in entries
                 if entry.path not in present]
    return problems
