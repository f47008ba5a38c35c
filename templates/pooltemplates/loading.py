"""Finding template files (packaged ones and the files shipped beside them), following `extends`, applying
overrides, validating."""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .errors import Problem, TemplateError, TemplateWarning
from .overrides import apply_overrides
from .schema import PoolTemplate
from .structure import build_template
from .validation import validate

TEMPLATE_SUFFIXES = (".yaml", ".yml")
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
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TemplateError(f"template {name!r}", [Problem(
            "template", str(source), "file does not exist", "a path to a .yaml file")]) from None
    except yaml.YAMLError as exc:
        raise TemplateError(f"template {name!r}", [Problem(
            "template", str(source), f"is not valid YAML: {exc}", "YAML mapping")]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TemplateError(f"template {name!r}", [Problem(
            "template", data, "must be a YAML mapping", "keys such as nodes, executor, gpu")])
    return data


def _deep_merge(base: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in child.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
