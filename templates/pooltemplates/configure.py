"""Reads a Synapse / Livy `%%configure` cell body (what targets/synapse.py writes) into a pool template, checked
with the templates' rules: every problem at once, each named by the cell's own field."""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .errors import Problem, TemplateError
from .overrides import apply_overrides
from .schema import SERIALIZER_CLASSES, PoolTemplate, owning_field
from .structure import build_template
from .validation import validate

# Livy's session fields (POST /sessions) that size the session, and the template field each one sets.
SIZING_FIELDS = {
    "driverMemory": "driver.memory",
    "driverCores": "driver.cores",
    "executorMemory": "executor.memory",
    "executorCores": "executor.cores",
    "numExecutors": "executor.instances",
}
# Livy's fields that are Spark conf keys under another name (lists are joined with commas, as spark-submit's).
CONF_FIELDS = {
    "jars": "spark.jars",
    "pyFiles": "spark.submit.pyFiles",
    "files": "spark.files",
    "archives": "spark.archives",
    "name": "spark.app.name",
}
LIST_FIELDS = ("jars", "pyFiles", "files", "archives")
KNOWN_FIELDS = (*SIZING_FIELDS, "conf", *CONF_FIELDS)
# The template field a Livy field sets, for naming problems in the cell's own words.
_CELL_NAMES = {field: name for name, field in SIZING_FIELDS.items()}
_SERIALIZER_TYPES = {cls: name for name, cls in SERIALIZER_CLASSES.items()}
SUBJECT = "%%configure"


def parse_body(text: str) -> dict[str, Any]:
    """The cell's JSON object; invalid JSON is named by line and column."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TemplateError(SUBJECT, [Problem("body", _line(text, exc.lineno), f"is not JSON: {exc.msg} at line "
                                              f"{exc.lineno} column {exc.colno}",
                                              'a JSON object, e.g. {"numExecutors": 2, "executorMemory": "4g"}')])
    if not isinstance(body, dict):
        raise TemplateError(SUBJECT, [Problem("body", body, "is not a JSON object",
                                              'a JSON object, e.g. {"numExecutors": 2, "executorMemory": "4g"}')])
    return body


def template_from_body(body: Mapping[str, Any], defaults: Mapping[str, Any], name: str = "notebook") -> PoolTemplate:
    """A validated one-node template from the cell's fields; `defaults` (Livy field -> value) fill the sizing
    fields the cell leaves out. Raises TemplateError listing every problem."""
    cell_names = dict(_CELL_NAMES)
    problems = [Problem(key, value, f"is not a field {SUBJECT} takes", "one of " + ", ".join(KNOWN_FIELDS))
                for key, value in body.items() if key not in KNOWN_FIELDS]
    assignments: dict[str, str] = {}
    for livy_name, field in SIZING_FIELDS.items():
        value = body.get(livy_name, defaults.get(livy_name))
        if value is not None:
            assignments[field] = _text(value)
    conf: dict[str, str] = {}
    for livy_name, key in CONF_FIELDS.items():
        if livy_name in body:
            value = body[livy_name]
            conf[key] = ",".join(map(str, value)) if livy_name in LIST_FIELDS and isinstance(value, list) else str(value)
    cell_conf = body.get("conf", {})
    if not isinstance(cell_conf, Mapping):
        problems.append(Problem("conf", cell_conf, "is not a JSON object", 'e.g. {"spark.sql.shuffle.partitions": "8"}'))
        cell_conf = {}
    for key, value in cell_conf.items():
        field = owning_field(key)
        if field is None:
            conf[key] = _text(value)
        else:  # a key a template field owns (spark.rapids.memory.gpu.reserve, spark.executorEnv.X, ...) sets it
            assignments[field] = _SERIALIZER_TYPES.get(_text(value), _text(value))
            cell_names.setdefault(field, f"conf.{key}")
    data, override_problems = apply_overrides({"description": f"the session of a {SUBJECT} cell", "nodes": 1,
                                               "executor": {"instances": 1}, "conf": conf}, assignments)
    problems += override_problems
    try:
        template = build_template(name, data)
        validate(template)
    except TemplateError as exc:
        problems += exc.problems
    if problems:
        raise TemplateError(SUBJECT, [_in_cell_words(problem, cell_names) for problem in problems])
    return template


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _in_cell_words(problem: Problem, cell_names: Mapping[str, str]) -> Problem:
    name = cell_names.get(problem.field)
    return Problem(name, problem.value, problem.rule, problem.valid) if name else problem


def _line(text: str, number: int) -> str:
    lines = text.splitlines()
    return lines[number - 1] if 0 < number <= len(lines) else ""
