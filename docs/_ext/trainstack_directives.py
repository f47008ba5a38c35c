"""The site's own Sphinx directives, each rendering what the code or the tested examples hold, so a page cannot
show a command, cell or message that nothing runs:

- `{workflow} NAME`: a workflow's command as the image tier runs it (trainstack/image/workflows.py);
- `{lab-command}`: the line that starts JupyterLab in the image, as the image tier starts it;
  both take `:image: published` to show the image CI publishes (ghcr.io/OWNER/trainstack:cpu) instead of the one a
  build here tags (trainstack:cpu);
- `{published-image} STEP`: getting and checking a published image (`pull`, `pull-mirror`, `pin`, `verify`,
  `check`, `sbom`), the commands made by trainstack/image/published_images.py from what the CI workflow publishes;
- `{notebook-cell} NOTEBOOK CELL_ID`: a cell of examples/notebooks/NOTEBOOK.ipynb, which the image tier executes;
- `{raised-by}`: the error families a catalogue entry explains (`PATH ErrorClass` a line), with the messages the
  code makes; the build warns about a family the code no longer raises and one no entry names;
- `{code-map} ROOT`: a code map, warned about where it lacks a folder or module or names one that is gone.
"""
from __future__ import annotations

import json
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from trainstack.docsite.code_map import map_problems, repository_files
from trainstack.docsite.error_families import Family, error_families, family_messages

REPO_ROOT = Path(__file__).resolve().parents[2]  # docs/_ext/ in the repository
NOTEBOOKS_DIR = REPO_ROOT / "examples" / "notebooks"
logger = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def _messages() -> dict[Family, list[str]]:
    return family_messages(REPO_ROOT)


@lru_cache(maxsize=1)
def _files() -> tuple[str, ...]:
    return tuple(repository_files(REPO_ROOT))


IMAGE_OPTION = {"image": lambda value: directives.choice(value, ("published",))}


class WorkflowDirective(SphinxDirective):
    required_arguments = 1
    option_spec = IMAGE_OPTION

    def run(self) -> list[nodes.Node]:
        from trainrun.image_contract import NOTEBOOK_DIR
        from trainstack.image.workflows import WORKFLOWS

        workflows = {workflow.name: workflow for workflow in WORKFLOWS}
        name = self.arguments[0]
        if name not in workflows:
            raise self.error(f"workflow = {name!r}: is not in trainstack/image/workflows.py "
                             f"(valid: {', '.join(workflows)})")
        workflow = workflows[name]
        # The MLflow rows' store is in the work folder: on a volume, it outlives the container (as the test mounts one).
        volume = f'-v "$PWD":{NOTEBOOK_DIR} ' if workflow.experiment else ""
        command = (f"$ docker run --rm --shm-size 1g {volume}{_cpu_image(self.options)} \\\n"
                   f"    {shlex.join(workflow.command)}")
        block = nodes.literal_block(command, command, language="console")
        note = nodes.paragraph()
        note += nodes.Text("The image tier runs this command in the image (")
        note += nodes.literal(text=f"tests/image/test_workflows.py[{name}]")
        checks = ["that the model learned", "that both ranks took part"]
        if workflow.writes_checkpoint:
            checks.append("that rank 0 alone wrote the checkpoint")
        if workflow.experiment:
            checks.append(f"that MLflow's store holds one run of the experiment {workflow.experiment!r}, with every "
                          "epoch's loss")
        note += nodes.Text("), checking " + ", ".join(checks[:-1]) + " and " + checks[-1] + ".")
        return [block, note]


def _cpu_image(options: dict[str, Any]) -> str:
    """The cpu image a build here tags, or with `:image: published` the one CI publishes."""
    from trainstack.image.published_images import published_reference
    from trainstack.image.naming import image_reference
    from trainstack.image.matrix import load_matrix

    if options.get("image") == "published":
        return published_reference("cpu")
    return image_reference(load_matrix().image_name, "cpu")


class LabCommandDirective(SphinxDirective):
    option_spec = IMAGE_OPTION

    def run(self) -> list[nodes.Node]:
        from trainrun.image_contract import JUPYTER_PORT, NOTEBOOK_DIR

        port = f"127.0.0.1:{JUPYTER_PORT}:{JUPYTER_PORT}"
        command = f'$ docker run --rm -p {port} -v "$PWD":{NOTEBOOK_DIR} {_cpu_image(self.options)} lab'
        note = nodes.paragraph()
        note += nodes.Text("The image tier starts the image's ")
        note += nodes.literal(text="lab")
        note += nodes.Text(f" role so, its port {JUPYTER_PORT} published on 127.0.0.1 (")
        note += nodes.literal(text="tests/image/test_lab.py")
        note += nodes.Text("), and checks that the URL it prints, with its token, opens JupyterLab, and that nothing "
                           "opens without the token.")
        return [nodes.literal_block(command, command, language="console"), note]


class NotebookCellDirective(SphinxDirective):
    required_arguments = 2

    def run(self) -> list[nodes.Node]:
        notebook_name, cell_id = self.arguments
        path = NOTEBOOKS_DIR / f"{notebook_name}.ipynb"
        if not path.exists():
            raise self.error(f"notebook = {notebook_name!r}: is not in examples/notebooks/")
        self.env.note_dependency(str(path))
        cells = {cell.get("id"): cell for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]}
        if cell_id not in cells:
            raise self.error(f"cell = {cell_id!r}: is not a cell id of {path.name} (valid: {', '.join(cells)})")
        source = cells[cell_id]["source"]
        text = "".join(source) if isinstance(source, list) else source
        block = nodes.literal_block(text, text, language="ipython3")
        caption = nodes.paragraph()
        caption += nodes.Text("Cell ")
        caption += nodes.literal(text=cell_id)
        caption += nodes.Text(" of ")
        caption += nodes.literal(text=f"examples/notebooks/{path.name}")
        caption += nodes.Text(", which the image tier runs (")
        caption += nodes.literal(text="tests/image/test_notebooks.py")
        caption += nodes.Text("); its outputs: ")
        xref = pending_xref("", refdomain="std", reftype="doc", reftarget=f"/notebooks/{notebook_name}",
                            refexplicit=False, refdoc=self.env.docname)
        xref += nodes.inline(text=notebook_name)
        caption += xref
        caption += nodes.Text(".")
        return [block, caption]


class PublishedImageDirective(SphinxDirective):
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        from trainstack.image import published_images as published
        from trainstack.image.matrix import load_matrix

        reference = published.published_reference(published.DEFAULT_FLAVOR)
        content_tag = published.flavor_content_tag(load_matrix().flavor(published.DEFAULT_FLAVOR))
        steps = {
            "pull": [published.pull_command(reference)],
            "pull-mirror": [published.pull_command(
                published.published_reference(published.DEFAULT_FLAVOR, published.DOCKER_HUB_NAMESPACE))],
            "pin": [published.pull_command(published.published_reference(f"{content_tag}-YYYY.MM.DD-COMMIT")),
                    shlex.join(["docker", "inspect", "--format", "{{index .RepoDigests 0}}", reference]),
                    published.pull_command(published.published_digest_reference("sha256:DIGEST"))],
            "verify": [published.verify_command(reference)],
            "check": published.check_commands(reference),
            "sbom": [published.sbom_command(reference)],
        }
        step = self.arguments[0]
        if step not in steps:
            raise self.error(f"step = {step!r}: is not a step of {{published-image}} (valid: {', '.join(steps)})")
        text = "\n".join(f"$ {line}" for line in steps[step])
        note = nodes.paragraph()
        note += nodes.Text("For the image the CI workflow publishes (")
        note += nodes.literal(text=published.WORKFLOW_PATH)
        note += nodes.Text("); the commands are made from it and held to it by ")
        note += nodes.literal(text="tests/unit/docs/test_published_images.py")
        note += nodes.Text(".")
        return [nodes.literal_block(text, text, language="console"), note]


class RaisedByDirective(SphinxDirective):
    has_content = True

    def run(self) -> list[nodes.Node]:
        known = _messages()
        result: list[nodes.Node] = []
        named = _named(self.env)
        for offset, line in enumerate(self.content):
            if not line.strip():
                continue
            try:
                path, error = line.split()
            except ValueError:
                raise self.error(f"{line!r}: a {{raised-by}} line is `PATH ErrorClass`") from None
            family = Family(path, error)
            named[str(family)] = (self.env.docname, self.lineno + offset + 1)
            if family not in known:
                logger.warning(f"error family `{family}` is not raised by the code (any longer): remove it or "
                               "name where it moved", location=(self.env.docname, self.lineno + offset + 1))
            paragraph = nodes.paragraph()
            paragraph += nodes.literal(text=error)
            paragraph += nodes.Text(" from ")
            paragraph += nodes.literal(text=path)
            paragraph += nodes.Text(":" if known.get(family) else ".")
            result.append(paragraph)
            if known.get(family):
                items = nodes.bullet_list()
                for message in known[family]:
                    items += nodes.list_item("", nodes.paragraph("", "", nodes.literal(text=message)))
                result.append(items)
        container = nodes.container(classes=["raised-by"])
        container += result
        return [container]


class CodeMapDirective(SphinxDirective):
    required_arguments = 1
    has_content = True
    option_spec = {"depth": directives.positive_int}

    def run(self) -> list[nodes.Node]:
        text = "\n".join(self.content)
        for line, problem in map_problems(text, self.arguments[0], list(_files()), self.options.get("depth")):
            logger.warning(f"code map: {problem}", location=(self.env.docname, self.content_offset + line + 1))
        return [nodes.literal_block(text, text, language="text")]


def _named(env: BuildEnvironment) -> dict[str, tuple[str, int]]:
    """The families the catalogue's {raised-by} blocks name: family -> (document, line)."""
    if not hasattr(env, "trainstack_families"):
        env.trainstack_families = {}
    return env.trainstack_families


def _check_catalogue(app: Sphinx, env: BuildEnvironment) -> None:
    named = _named(env)
    if not named:
        return
    for family in sorted(set(_messages()) - {Family(*name.split()) for name in named}):
        logger.warning(f"error family `{family}` has no entry in the error catalogue: add it to a {{raised-by}} "
                       "block with its cause and fix", location="reference/errors")


def _merge(app: Sphinx, env: BuildEnvironment, docnames: Any, other: BuildEnvironment) -> None:
    _named(env).update(_named(other))


def _purge(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    families = _named(env)
    for name in [name for name, (doc, _) in families.items() if doc == docname]:
        del families[name]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("workflow", WorkflowDirective)
    app.add_directive("lab-command", LabCommandDirective)
    app.add_directive("notebook-cell", NotebookCellDirective)
    app.add_directive("published-image", PublishedImageDirective)
    app.add_directive("raised-by", RaisedByDirective)
    app.add_directive("code-map", CodeMapDirective)
    app.connect("env-check-consistency", _check_catalogue)
    app.connect("env-merge-info", _merge)
    app.connect("env-purge-doc", _purge)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
