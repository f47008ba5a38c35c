"""`--set key=value` overrides: dotted keys into the template, values typed by the schema."""
from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping
from typing import Any, Literal, get_args, get_origin

from .errors import Problem, TemplateError
from .schema import PoolTemplate
from .structure import describe, settable_fields, unwrap_optional, wrong_value_rule


def parse_assignments(assignments: Iterable[str], example: str = "executor.instances=4") -> dict[str, str]:
    """['executor.instances=4', ...] -> {'executor.instances': '4', ...}; also the image matrix's `--set`."""
    parsed: dict[str, str] = {}
    problems = []
    for assignment in assignments:
        key, equals, value = assignment.partition("=")
        if not equals or not key.strip():
            problems.append(Problem("--set", assignment, "must look like key=value", f"e.g. {example}"))
            continue
        parsed[key.strip()] = value
    if problems:
        raise TemplateError("--set", problems)
    return parsed


def apply_overrides(data: Mapping[str, Any],
                    overrides: Mapping[str, str]) -> tuple[dict[str, Any], list[Problem]]:
    """A copy of the template data with each good override set, and the problems of the bad ones."""
    patched = _deep_copy(data)
    problems = []
    for key, text in overrides.items():
        try:
            path, hint = _resolve(key)
            value = _parse(hint, text)
        except ValueError as exc:
            problems.append(Problem(key, text, str(exc), _valid_hint(key, exc)))
            continue
        section = patched
        for part in path[:-1]:
            if not isinstance(section.get(part), dict):
                section[part] = {}
            section = section[part]
        section[path[-1]] = value
    return patched, problems


def override_keys() -> list[str]:
    """Every key --set accepts; NAME stands for any executor env variable or Spark conf key."""
    keys = []

    def walk(cls: type, prefix: str) -> None:
        for name, hint in settable_fields(cls).items():
            inner, _ = unwrap_optional(hint)
            if dataclasses.is_dataclass(inner):
                walk(inner, f"{prefix}{name}.")
            elif get_origin(inner) is dict:
                keys.append(f"{prefix}{name}.NAME")
            else:
                keys.append(f"{prefix}{name}")

    walk(PoolTemplate, "")
    return keys


class _UnknownKey(ValueError):
    pass


def _resolve(key: str) -> tuple[list[str], Any]:
    parts = key.split(".")
    cls: type = PoolTemplate
    for index, part in enumerate(parts):
        fields = settable_fields(cls)
        if part not in fields:
            raise _UnknownKey("is not a template setting")
        hint = fields[part]
        inner, _ = unwrap_optional(hint)
        rest = parts[index + 1:]
        if get_origin(inner) is dict:
            if not rest:
                raise _UnknownKey("names a mapping; set one entry of it")
            return parts[:index + 1] + [".".join(rest)], str
        if dataclasses.is_dataclass(inner):
            if not rest:
                raise _UnknownKey("names a section; set one key in it")
            cls = inner
            continue
        if rest:
            raise _UnknownKey("is not a section")
        return parts, hint
    raise _UnknownKey("is empty")


def _parse(hint: Any, text: str) -> Any:
    inner, _ = unwrap_optional(hint)
    try:
        if get_origin(inner) is Literal:
            if text not in get_args(inner):
                raise ValueError
            return text
        if inner is bool:
            return {"true": True, "false": False}[text.strip().lower()]
        if inner is int:
            return int(text)
        if inner is float:
            return float(text)
    except (KeyError, ValueError):
        raise ValueError(wrong_value_rule(inner)) from None
    return text


def _valid_hint(key: str, exc: ValueError) -> str:
    if isinstance(exc, _UnknownKey):
        close = difflib.get_close_matches(key, override_keys(), n=3)
        known = ", ".join(close) if close else "; ".join(override_keys())
        return f"did you mean {known}" if close else f"one of {known}"
    return describe(unwrap_optional(_resolve(key)[1])[0])


def _deep_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _deep_copy(value) if isinstance(value, Mapping) else value
            for key, value in data.items()}
