"""Finding template files (packaged ones and the files shipped beside them), following `extends`, applying
overrides, validating."""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .errors import MAX_SHOWN, Problem, TemplateError, TemplateWarning
from .overrides import apply_overrides
from .schema import PoolTemplate
from .structure import build_template
from .validation import validate

TEMPLATE_SUFFIXES = (".yaml", ".yml")
TEMPLATE_FILE = "a YAML mapping with keys such as description, nodes, executor, gpu"
# A template is a page of YAML; these bounds refuse any other file (a device, a log, an alias bomb) quickly.
MAX_TEMPLATE_BYTES = 1 << 20
MAX_TEMPLATE_NODES = 10_000
DISCOVERY_SCRIPT = "scripts/discover-gpus.sh"


def pools_dir() -> Path:
    """The directory of packaged template YAML files (the package installs unzipped)."""
    return Path(str(resources.files("pooltemplates").joinpath("pools")))


def package_file(relative: str) -> Path:
    """The on-disk path of a file shipped in pooltemplates, e.g. DISCOVERY_SCRIPT for bind mounts."""
    path = Path(str(resources.files("pooltemplates").joinpath(relative)))
    if not path.is_file():
        raise FileNotFoundError(f"pooltemplates ships no file {relative!r}")
    return path


def packaged_templates() -> list[str]:
    """Names of the templates shipped in this package."""
    return sorted(path.stem for path in pools_dir().glob("*.yaml"))


def load_template(name_or_path: str, overrides: Mapping[str, str] | None = None) -> PoolTemplate:
    """A validated template: a packaged name ('synapse-gpu-large') or a YAML file path.

    Raises TemplateError listing every problem; issues TemplateWarning for each suspicious setting.
    """
    template, override_problems = _read(name_or_path, overrides)
    try:
        found = validate(template)
    except TemplateError as exc:
        raise TemplateError(exc.subject, [*override_problems, *exc.problems]) from None
    if override_problems:
        raise TemplateError(f"template {template.name!r}", override_problems)
    for problem in found:
        warnings.warn(TemplateWarning(f"template {template.name!r}", problem), stacklevel=2)
    return template


def read_template(name_or_path: str, overrides: Mapping[str, str] | None = None) -> PoolTemplate:
    """The template with `extends` merged and overrides applied, type-checked but not validated."""
    template, override_problems = _read(name_or_path, overrides)
    if override_problems:
        raise TemplateError(f"template {template.name!r}", override_problems)
    return template


def _read(name_or_path: str,
          overrides: Mapping[str, str] | None) -> tuple[PoolTemplate, list[Problem]]:
    source = _locate(name_or_path, relative_to=None)
    data, override_problems = apply_overrides(_merged_data(source, chain=()), overrides or {})
    return build_template(source.stem, data, override_problems), override_problems


def _is_path(reference: str) -> bool:
    return reference.endswith(TEMPLATE_SUFFIXES) or "/" in reference


def _locate(reference: str, relative_to: Path | None) -> Path:
    if _is_path(reference):
        path = Path(reference).expanduser()
        return relative_to / path if relative_to is not None else path
    source = pools_dir().joinpath(f"{reference}.yaml")
    if not source.is_file():
        raise TemplateError(f"template {reference!r}", [Problem(
            "template", reference, "is neither a packaged template nor a .yaml path",
            "one of " + ", ".join(packaged_templates()) + ", or a path to a .yaml file")])
    return source


def _merged_data(source: Path, chain: tuple[str, ...]) -> dict[str, Any]:
    name = source.stem
    identity = str(source.resolve())
    if identity in chain:
        raise TemplateError(f"template {name!r}", [Problem(
            "extends", " -> ".join((*chain, identity)), "templates extend each other in a cycle",
            "an extends chain that ends in a template without extends")])
    data = _read_yaml(source)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise TemplateError(f"template {name!r}", [Problem(
            "extends", parent, "must name one template", "a template name or a .yaml path")])
    parent_source = _locate(parent, relative_to=source.parent)
    return _deep_merge(_merged_data(parent_source, (*chain, identity)), data)


def _read_yaml(source: Path) -> dict[str, Any]:
    name = source.stem

    def refuse(rule: str, valid: str = TEMPLATE_FILE) -> TemplateError:
        # The file is named, never shown: it may be any file (/etc/passwd) and any size.
        return TemplateError(f"template {name!r}", [Problem("template", str(source), rule, valid)])

    if not source.exists():
        raise refuse("file does not exist", "a packaged template name or a path to a .yaml file")
    if not source.is_file():
        raise refuse("is not a regular file (a directory or a device)")
    try:
        with source.open("rb") as file:
            content = file.read(MAX_TEMPLATE_BYTES + 1)
    except OSError as exc:
        raise refuse(f"cannot be read ({exc.strerror})") from None
    if len(content) > MAX_TEMPLATE_BYTES:
        raise refuse(f"is larger than {MAX_TEMPLATE_BYTES // 1024} KiB, so not a template")
    try:
        data = _parse_yaml(content.decode("utf-8"))
    except UnicodeDecodeError:
        raise refuse("is not UTF-8 text, so not a template") from None
    except _TooLarge:
        raise refuse(f"expands to more than {MAX_TEMPLATE_NODES} YAML nodes (anchors and aliases expanded) "
                     "or refers to itself", f"{TEMPLATE_FILE}, of at most {MAX_TEMPLATE_NODES} nodes") from None
    except RecursionError:
        raise refuse("nests too deeply to be a template") from None
    except yaml.YAMLError as exc:
        raise refuse(f"is not valid YAML ({_where(exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        kind = "sequence" if isinstance(data, list) else "scalar"
        raise refuse(f"is not a valid template: it holds a YAML {kind}, not a mapping")
    return data


class _TooLarge(Exception):
    pass


def _parse_yaml(text: str) -> Any:
    """yaml.safe_load, refusing a document whose nodes, with every alias expanded, exceed MAX_TEMPLATE_NODES."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_nodes(node) > MAX_TEMPLATE_NODES:
            raise _TooLarge
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_nodes(root: yaml.Node) -> int:
    """Nodes of the document as if each alias were a copy of its anchor, counted up to MAX_TEMPLATE_NODES + 1.

    An alias is the same node object as its anchor, so sizes are memoized per node; one still being counted
    when reached again is an anchor containing its own alias, which is infinite."""
    limit = MAX_TEMPLATE_NODES + 1
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = limit
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        total = 1
        for child in children:
            total = min(limit, total + size(child))
            if total == limit:
                break
        sizes[id(node)] = total
        return total

    return size(root)


def _where(exc: yaml.YAMLError) -> str:
    """The parser's complaint and position, without its excerpt of the file."""
    mark = getattr(exc, "problem_mark", None)
    problem = str(getattr(exc, "problem", None) or type(exc).__name__)[:MAX_SHOWN]
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else problem


def _deep_merge(base: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in child.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
