"""The commands and cells the pages show, written into their Markdown between markers, so that the sources read on
GitHub show what the site shows, and made from what the tests run:

- `<!-- workflow NAME:start -->`: a workflow's command (trainstack/image/workflows.py), as `docker run` of the
  published image; the image tier runs the command itself (tests/image/test_workflows.py);
- `<!-- lab-command:start -->`: the line that starts JupyterLab in the published image (tests/image/test_lab.py);
- `<!-- notebook-cell NOTEBOOK CELL_ID:start -->`: a cell of examples/notebooks/NOTEBOOK.ipynb, which the image
  tier executes (tests/image/test_notebooks.py), with a link to the page of its outputs;
- `<!-- published-image STEP:start -->`: getting and checking the published image (`pull`, `pull-mirror`, `pin`,
  `verify`, `check`, `sbom`), made by trainstack/image/published_images.py from what the CI workflow publishes;
- `<!-- slurm-script PATH:start -->`: a batch script, either an example of examples/slurm/, which the integration
  tier submits to its Slurm cluster (tests/integration/test_slurm.py), or a golden file of the pool templates' slurm
  target (tests/unit/templates/golden/), which the unit tier checks against the renderer;
- `<!-- example-code PATH [SELECTOR...]:start -->`: code of an example script a workflow runs (the image tier runs the
  workflows, tests/image/test_workflows.py), the whole file or the part its selectors pick: `pyobject=NAME` (a function
  or class, with its decorators), `start-at=TEXT`, `end-at=TEXT`, `end-before=TEXT` (the first line holding TEXT),
  quoted as a shell quotes them (`start-at='if rank == 0:'`); what is left is dedented.

`invoke docs` writes them (trainstack.docsite.pages); a block that differs from what this module gives fails
`invoke docs --check` and tests/unit/docs/test_generated_pages.py, named by file and line. Commands are
`shell-session` blocks, cells `ipython3` blocks and example code `python3` blocks, which GitHub and the site render alike and the host's snippet
tests (`console`, `python` blocks) leave to the image tier.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = REPO_ROOT / "examples" / "notebooks"
KINDS = ("workflow", "lab-command", "notebook-cell", "published-image", "slurm-script", "example-code")
MARKER = re.compile(r"<!-- (?P<marker>(?P<kind>" + "|".join(KINDS) + r")(?: (?P<args>[^>]*?))?):start -->")
FENCED_BLOCK = re.compile(r"^(?P<fence>`{3,})(?P<language>[\w-]+)\n(?P<body>.*?)\n(?P=fence)$",
                          re.MULTILINE | re.DOTALL)
# The pages that hold such markers.
PAGE_GLOBS = ("docs/quickstarts/*.md", "docs/guides/*.md")
CHECKPOINTS_ARGUMENT = "--checkpoint-dir /tmp/checkpoints"
# Where the batch scripts a page may show live: (folder, file pattern).
SLURM_SCRIPT_PLACES = (("examples/slurm", "*.sbatch"), ("tests/unit/templates/golden", "*.slurm*.sbatch"))
EXAMPLE_SELECTORS = ("pyobject", "start-at", "end-at", "end-before")


class ShownError(ValueError):
    """A marker that names no workflow, cell or step."""


@dataclass
class PageState:
    """What a page has said already, so that a note is said once per page, under the first block it concerns."""

    checkpoints: bool = False
    mlflow: bool = False


def cpu_image() -> str:
    """The cpu image CI publishes, which a user who pulled it has by that name; `docker tag trainstack:cpu
    ghcr.io/OWNER/trainstack:cpu` runs the pages' commands on an image built here."""
    from trainstack.image.published_images import published_reference

    return published_reference("cpu")


def workflow_command(name: str) -> str:
    """A workflow's command as a page shows it: `docker run` of the published image. The MLflow rows' store is in
    the work folder, on a volume so that it outlives the container; started as root, the image's user becomes the
    folder's owner (images/scripts/work_folder.py)."""
    from trainrun.image_contract import NOTEBOOK_DIR

    workflow = _workflow(name)
    volume = f'--user root -v "$PWD":{NOTEBOOK_DIR} ' if workflow.experiment else ""
    return f"$ docker run --rm --shm-size 1g {volume}{cpu_image()} \\\n    {shlex.join(workflow.command)}"


def _workflow(name: str):
    from trainstack.image.workflows import WORKFLOWS

    workflows = {workflow.name: workflow for workflow in WORKFLOWS}
    if name not in workflows:
        raise ShownError(f"workflow = {name!r}: is not in trainstack/image/workflows.py (valid: {', '.join(workflows)})")
    return workflows[name]


def lab_command() -> str:
    from trainrun.image_contract import JUPYTER_PORT, NOTEBOOK_DIR

    port = f"127.0.0.1:{JUPYTER_PORT}:{JUPYTER_PORT}"
    return f'$ docker run --rm --user root -p {port} -v "$PWD":{NOTEBOOK_DIR} {cpu_image()} lab'


def notebook_cell(notebook: str, cell_id: str) -> str:
    """The source of a cell of examples/notebooks/NOTEBOOK.ipynb."""
    path = NOTEBOOKS_DIR / f"{notebook}.ipynb"
    if not path.exists():
        raise ShownError(f"notebook = {notebook!r}: is not in examples/notebooks/")
    cells = {cell.get("id"): cell for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]}
    if cell_id not in cells:
        raise ShownError(f"cell = {cell_id!r}: is not a cell id of {path.name} (valid: {', '.join(cells)})")
    source = cells[cell_id]["source"]
    return "".join(source) if isinstance(source, list) else source


def published_image_commands(step: str) -> list[str]:
    from trainstack.image import published_images as published
    from trainstack.image.matrix import load_matrix

    reference = published.published_reference(published.DEFAULT_FLAVOR)
    content_tag = published.flavor_content_tag(load_matrix().flavor(published.DEFAULT_FLAVOR))
    steps = {
        "pull": [published.pull_command(reference)],
        "pull-mirror": [published.pull_command(
            published.published_reference(published.DEFAULT_FLAVOR, published.DOCKER_HUB_NAMESPACE))],
        "pin": [published.pull_command(published.published_reference(f"{content_tag}-YYYY.MM.DD-COMMIT")),
                published.digest_command(reference),
                published.pull_command(published.published_digest_reference("sha256:DIGEST"))],
        "pin-local": [published.local_id_command("trainstack:cpu")],
        "verify": [published.verify_command(reference)],
        "check": published.check_commands(reference),
        "sbom": [published.sbom_command(reference)],
    }
    if step not in steps:
        raise ShownError(f"step = {step!r}: is not a step of published-image (valid: {', '.join(steps)})")
    return steps[step]


def slurm_script(path: str) -> str:
    """A batch script of SLURM_SCRIPT_PLACES, as the file holds it."""
    valid = sorted(found.relative_to(REPO_ROOT).as_posix() for folder, pattern in SLURM_SCRIPT_PLACES
                   for found in (REPO_ROOT / folder).glob(pattern))
    if path not in valid:
        raise ShownError(f"slurm-script = {path!r}: is not a batch script the tests run (valid: {', '.join(valid)})")
    return (REPO_ROOT / path).read_text(encoding="utf-8")


def example_scripts() -> list[str]:
    """The example scripts the workflows run, relative to the repository (examples/NAME.py for the image's
    /opt/trainstack/examples/NAME.py)."""
    from trainrun.image_contract import EXAMPLES_DIR
    from trainstack.image.workflows import WORKFLOWS

    prefix = f"{EXAMPLES_DIR}/"
    return sorted({f"examples/{part[len(prefix):]}" for workflow in WORKFLOWS for part in workflow.command
                   if part.startswith(prefix) and part.endswith(".py")})


def example_code(path: str, selectors: list[str]) -> str:
    """The lines of an example script its selectors pick (EXAMPLE_SELECTORS, applied in that order), dedented."""
    valid = example_scripts()
    if path not in valid:
        raise ShownError(f"example-code = {path!r}: is not an example script a workflow runs (valid: {', '.join(valid)})")
    source = (REPO_ROOT / path).read_text(encoding="utf-8")
    lines = source.splitlines()
    chosen: dict[str, str] = {}
    for selector in selectors:
        key, equals, value = selector.partition("=")
        if key not in EXAMPLE_SELECTORS or not equals or not value or key in chosen:
            raise ShownError(f"example-code {path}: {selector!r} is not one selector of "
                             f"{', '.join(f'{key}=...' for key in EXAMPLE_SELECTORS)}")
        chosen[key] = value
    if "end-at" in chosen and "end-before" in chosen:
        raise ShownError(f"example-code {path}: end-at and end-before both given")
    first, last = 0, len(lines)
    if "pyobject" in chosen:
        first, last = _pyobject_lines(ast.parse(source), chosen["pyobject"], path)

    def find(key: str, start: int) -> int:
        found = next((index for index in range(start, last) if chosen[key] in lines[index]), None)
        if found is None:
            raise ShownError(f"example-code {path}: {key}={chosen[key]!r}: no line holds it")
        return found

    if "start-at" in chosen:
        first = find("start-at", first)
    if "end-at" in chosen:
        last = find("end-at", first) + 1
    elif "end-before" in chosen:
        last = find("end-before", first)
    return textwrap.dedent("\n".join(lines[first:last])).strip("\n") + "\n"


def _pyobject_lines(module: ast.Module, name: str, path: str) -> tuple[int, int]:
    """(first, last + 1) line indexes of the function or class NAME (dotted for a method), decorators included."""
    body: list[ast.stmt] = module.body
    node = None
    for part in name.split("."):
        node = next((statement for statement in body if isinstance(
            statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and statement.name == part), None)
        if node is None:
            raise ShownError(f"example-code {path}: pyobject={name!r}: no function or class of that name")
        body = node.body
    assert node is not None and node.end_lineno is not None
    return min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)]) - 1, node.end_lineno


def _prose(text: str) -> str:
    return textwrap.fill(text, width=120, break_long_words=False, break_on_hyphens=False)


def _block(language: str, text: str) -> str:
    fence = "````" if "```" in text else "```"
    return f"{fence}{language}\n{text.rstrip(chr(10))}\n{fence}"


def render(kind: str, args: list[str], page: str, state: PageState | None = None) -> str:
    """The Markdown between a marker's start and end lines."""
    from trainrun.image_contract import NOTEBOOK_DIR

    state = state if state is not None else PageState()
    if kind == "workflow" and len(args) == 1:
        workflow = _workflow(args[0])
        parts = [_block("shell-session", workflow_command(args[0]))]
        if CHECKPOINTS_ARGUMENT in " ".join(workflow.command) and not state.checkpoints:
            state.checkpoints = True
            parts.append(f"`{CHECKPOINTS_ARGUMENT}` is a folder of the container, which `--rm` removes with it, "
                         "and the checkpoint with it. To keep it, mount your folder and write it there: "
                         f'`--user root -v "$PWD":{NOTEBOOK_DIR}` before the image, `--checkpoint-dir '
                         f"{NOTEBOOK_DIR}/checkpoints` after the script.")
        if workflow.experiment and not state.mlflow:
            state.mlflow = True
            parts.append("The MLflow run, its metrics and its artifacts stay in the current folder: `mlflow.db` and "
                         "`mlartifacts/`.")
        return "\n\n".join([parts[0], *(_prose(part) for part in parts[1:])])
    if kind == "lab-command" and not args:
        return _block("shell-session", lab_command())
    if kind == "notebook-cell" and len(args) == 2:
        from trainrun.image_contract import EXAMPLES_DIR

        notebook, cell_id = args
        link = Path(os.path.relpath(f"docs/notebooks/{notebook}.ipynb", os.path.dirname(page) or "."))
        return (f"{_block('ipython3', notebook_cell(notebook, cell_id))}\n\n" + _prose(
            f"Cell `{cell_id}` of `examples/notebooks/{notebook}.ipynb` (in the image: `{EXAMPLES_DIR}/notebooks/"
            f"{notebook}.ipynb`); its outputs: [{notebook}]({link.as_posix()})."))
    if kind == "published-image" and len(args) == 1:
        return _block("shell-session", "\n".join(f"$ {line}" for line in published_image_commands(args[0])))
    if kind == "slurm-script" and len(args) == 1:
        return _block("bash", slurm_script(args[0]))
    if kind == "example-code" and args:
        return _block("python3", example_code(args[0], args[1:]))
    raise ShownError(f"<!-- {' '.join([kind, *args])}:start -->: not a marker of {', '.join(KINDS)} with its "
                     "arguments")


def arguments(match: re.Match) -> list[str]:
    """A marker's arguments, split as a shell splits them (an example-code selector may quote its spaces)."""
    try:
        return shlex.split(match["args"] or "")
    except ValueError as error:
        raise ShownError(f"{match.group(0)}: {error}") from None


def markers(text: str) -> list[tuple[str, str, list[str]]]:
    """(marker, kind, arguments) of each shown block of a page, in page order."""
    return [(match["marker"], match["kind"], arguments(match)) for match in MARKER.finditer(text)]


def shown_cells(text: str) -> list[tuple[str, str]]:
    """(cell id, source as the page shows it) of each notebook cell a page shows, in page order: what a reader pastes
    into a notebook of their own."""
    cells = []
    for match in MARKER.finditer(text):
        if match["kind"] != "notebook-cell":
            continue
        shown = text[match.end():_block_end(text, match)]
        block = next((block for block in FENCED_BLOCK.finditer(shown) if block["language"] == "ipython3"), None)
        if block is None:
            raise ShownError(f"{match.group(0)}: shows no ipython3 block")
        cells.append((arguments(match)[1], block["body"]))
    return cells


def prompt_commands(body: str) -> list[tuple[str, str]]:
    """(command, output shown) of each command of a console or shell-session block: `$ ` starts a command, a
    trailing backslash continues it, the lines up to the next `$ ` are its output."""
    pairs: list[tuple[str, list[str]]] = []
    continued = False
    for line in body.splitlines():
        if line.startswith("$ ") and not continued:
            pairs.append((line[2:], []))
        elif continued:
            pairs[-1] = (pairs[-1][0] + "\n" + line, pairs[-1][1])
        elif pairs:
            pairs[-1][1].append(line)
        continued = bool(pairs) and line.endswith("\\") and not pairs[-1][1]
    return [(command, "\n".join(output).strip() + "\n") for command, output in pairs]


def page_commands(text: str) -> list[str]:
    """Each command of a page's shell blocks, in page order, as a reader pastes it into bash: in shell-session and
    console blocks what follows `$ ` (with the lines its trailing backslashes continue), in bash blocks every line that
    is not a comment."""
    commands = []
    for block in FENCED_BLOCK.finditer(text):
        if block["language"] in ("shell-session", "console"):
            commands += [command for command, _ in prompt_commands(block["body"])]
        elif block["language"] == "bash":
            lines: list[str] = []
            for line in block["body"].splitlines():
                if lines and lines[-1].endswith("\\"):
                    lines[-1] += "\n" + line
                elif line.strip() and not line.lstrip().startswith("#"):
                    lines.append(line)
            commands += lines
    return commands


def pages(repo: Path = REPO_ROOT) -> list[str]:
    """The pages, relative to the repository, that hold shown blocks."""
    found = sorted({path for pattern in PAGE_GLOBS for path in repo.glob(pattern)})
    return [path.relative_to(repo).as_posix() for path in found if MARKER.search(path.read_text(encoding="utf-8"))]


def _block_end(text: str, match: re.Match, page: str = "") -> int:
    """Where the end marker of the block `match` starts."""
    end = f"<!-- {match['marker']}:end -->"
    close = text.find(end, match.end())
    if close < 0:
        raise ShownError(f"{page}: {match.group(0)} has no {end}")
    return close


def fill(text: str, page: str) -> str:
    """The page with each shown block made anew, in page order (a block shown twice is made twice)."""
    state, out, position = PageState(), [], 0
    for match in MARKER.finditer(text):
        if match.start() < position:
            continue
        close = _block_end(text, match, page)
        content = render(match["kind"], arguments(match), page, state)
        out += [text[position:match.end()], "\n", content, "\n"]
        position = close
    return "".join(out) + text[position:]
