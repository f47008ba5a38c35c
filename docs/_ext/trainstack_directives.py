"""The site's own Sphinx directives:

- `{raised-by}`: the error families a catalogue entry explains (`PATH ErrorClass` a line), with the messages the
  code makes; the build warns about a family the code no longer raises and one no entry names;
- `{code-map} ROOT`: a code map, warned about where it lacks a folder or module or names one that is gone.

The commands, cells and code the pages show (workflows, the lab command, notebook cells, the published image's steps,
batch scripts, example code) are not directives: they are written into the Markdown between markers by `invoke docs`
(trainstack/docsite/shown.py), so that the sources read on GitHub show them too.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from trainstack.docsite.code_map import map_problems, repository_files
from trainstack.docsite.error_families import Family, error_families, family_messages

REPO_ROOT = Path(__file__).resolve().parents[2]  # docs/_ext/ in the repository
logger = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def _messages() -> dict[Family, list[str]]:
    return family_messages(REPO_ROOT)


@lru_cache(maxsize=1)
def _files() -> tuple[str, ...]:
    return tuple(repository_files(REPO_ROOT))


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
    app.add_directive("raised-by", RaisedByDirective)
    app.add_directive("code-map", CodeMapDirective)
    app.connect("env-check-consistency", _check_catalogue)
    app.connect("env-merge-info", _merge)
    app.connect("env-purge-doc", _purge)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
