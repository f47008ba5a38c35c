"""Turns plain YAML data into schema objects, checking every value's type against the schema."""
from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from .errors import Problem, TemplateError
from .schema import Memory, PoolTemplate, spark_value
from .units import SIZE_EXAMPLE


class _Invalid:
    """Marks a value that failed its type check (the problem is already recorded)."""


_INVALID = _Invalid()


def build_template(name: str, data: Any, earlier: Iterable[Problem] = ()) -> PoolTemplate:
    """A PoolTemplate from merged YAML data, or a TemplateError listing every type problem.

    `earlier` problems (bad overrides) are reported with the type problems, if there are any.
    """
    problems: list[Problem] = []
    if isinstance(data, Mapping) and "name" in data:
        problems.append(Problem("name", data["name"], "a template's name is its file name",
                                f"leave it out; this template is {name!r}"))
        data = {key: value for key, value in data.items() if key != "name"}
    template = _build(PoolTemplate, data, "", problems, given={"name": name})
    if problems:
        raise TemplateError(f"template {name!r}", [*earlier, *problems])
    return template



def template_data(template: PoolTemplate) -> dict[str, Any]:
    """The plain YAML data that `build_template` reads back as `template` (a file named after the template keeps
    its name); unset fields are left out."""

    def without_unset(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: without_unset(item) for key, item in value.items() if item is not None}
        return value

    data = without_unset(dataclasses.asdict(template))
    del data["name"]
    return data

def describe(hint: Any) -> str:
    """What a value of this type looks like, for the 'valid:' part of a problem."""
    hint, optional = unwrap_optional(hint)
    if dataclasses.is_dataclass(hint):
        text = "a mapping with keys " + ", ".join(settable_fields(hint))
    elif get_origin(hint) is dict:
        text = "a mapping of names to text values"
    elif get_origin(hint) is Literal:
        text = "one of " + ", ".join(get_args(hint))
    else:
        text = {
            int: "a whole number",
            float: "a number",
            bool: "true or false",
            str: "text",
            Memory: SIZE_EXAMPLE,
        }[hint]
    return text + (" (or leave it unset)" if optional else "")


def unwrap_optional(hint: Any) -> tuple[Any, bool]:
    """(X, True) for `X | None`, (hint, False) otherwise; the schema has no other unions."""
    if get_origin(hint) in (Union, types.UnionType):
        (inner,) = [arg for arg in get_args(hint) if arg is not type(None)]
        return inner, True
    return hint, False


def settable_fields(cls: type) -> dict[str, Any]:
    """Field name -> type hint of a schema dataclass, as YAML may set them."""
    hints = get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.name != "name"}


def _convert(hint: Any, value: Any, path: str, problems: list[Problem]) -> Any:
    """The value as the schema type, or _INVALID after recording why not."""
    inner, optional = unwrap_optional(hint)
    if value is None:
        if optional:
            return None
        problems.append(Problem(path, value, "must be set", describe(hint)))
        return _INVALID
    if dataclasses.is_dataclass(inner):
        return _build(inner, value, path, problems)
    if get_origin(inner) is dict:
        return _convert_mapping(value, path, problems)
    if inner is float and _matches(inner, value) and not math.isfinite(value):
        problems.append(Problem(path, value, "must be a finite number", describe(hint)))
        return _INVALID
    if _matches(inner, value):
        return str(value) if inner is Memory else float(value) if inner is float else value
    problems.append(Problem(path, value, wrong_value_rule(inner), describe(hint)))
    return _INVALID


def wrong_value_rule(hint: Any) -> str:
    return "is not a known choice" if get_origin(hint) is Literal else "has the wrong type"


def _matches(hint: Any, value: Any) -> bool:
    if get_origin(hint) is Literal:
        return value in get_args(hint)
    if isinstance(value, bool):
        return hint is bool
    if hint is Memory:
        return isinstance(value, (str, int))
    if hint is float:
        return isinstance(value, (int, float))
    return isinstance(value, hint)


def _convert_mapping(value: Any, path: str, problems: list[Problem]) -> Any:
    if not isinstance(value, Mapping):
        problems.append(Problem(path, value, "must be a mapping", describe(dict[str, str])))
        return _INVALID
    converted = {}
    for key, item in value.items():
        if not isinstance(item, (str, int, float, bool)):
            problems.append(Problem(f"{path}.{key}", item, "must be a single value",
                                    "text, a number or true/false"))
            continue
        converted[str(key)] = spark_value(item)
    return converted


def _build(cls: type, data: Any, path: str, problems: list[Problem],
           given: Mapping[str, Any] | None = None) -> Any:
    where = path or "template"
    if not isinstance(data, Mapping):
        problems.append(Problem(where, data, "must be a mapping", describe(cls)))
        return _INVALID
    fields = settable_fields(cls)
    problems_before = len(problems)
    values = dict(given or {})
    for key, value in data.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in fields:
            problems.append(Problem(key_path, value, "is not a template setting",
                                    "one of " + ", ".join(fields)))
            continue
        values[key] = _convert(fields[key], value, key_path, problems)
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in values:
            key_path = f"{path}.{f.name}" if path else f.name
            problems.append(Problem(key_path, None, "is required", describe(fields[f.name])))
    if len(problems) > problems_before:
        return _INVALID
    return cls(**values)
