"""The pool templates' field reference from the schema (pooltemplates.schema and the rules' bounds): each field's
type, default, bounds, the Spark conf key it becomes and which render targets use it.

Which targets use a field is measured, not declared: a reference template that every target renders is rendered
again with that one field changed, and a target uses the field where its output changes (or refuses the change)."""
from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any

from pooltemplates import TemplateError, TemplateWarning
from pooltemplates.schema import EXECUTOR_ENV_PREFIX, SPARK_KEYS, PoolTemplate
from pooltemplates.structure import build_template, describe, settable_fields, unwrap_optional
from pooltemplates.overrides import override_keys
from pooltemplates.targets import TARGETS, render
from pooltemplates.validation import COUNT_RANGES, KRYO_BUFFER_LIMIT_MIB, validate
from trainrun.image_contract import DISCOVERY_SCRIPT_PATH
from trainstack.image.docs import markdown_table

# Every field set, a GPU pool every target renders (the training-job targets need one GPU per task and processes a
# multiple of the pods).
REFERENCE_TEMPLATE: dict[str, Any] = {
    "description": "every field set",
    "nodes": 4,
    "driver": {"memory": "8g", "cores": 2},
    "executor": {"instances": 4, "cores": 8, "memory": "32g", "task_cpus": 1, "env": {"NCCL_DEBUG": "WARN"}},
    "gpu": {"per_executor": 2, "per_task": 1, "discovery_script": DISCOVERY_SCRIPT_PATH, "reserve": "1g"},
    "serializer": {"type": "kryo", "kryo_buffer_max": "512m"},
    "dynamic_allocation": False,
    "job": {"kind": "horovod", "processes": 4},
    "conf": {"spark.sql.shuffle.partitions": "64"},
}
# One valid change per field (a NAME key adds an entry). A field missing here fails the page's generation.
CHANGES: dict[str, tuple[str, Any]] = {
    "description": ("description", "changed"),
    "nodes": ("nodes", 5),
    "executor.instances": ("executor.instances", 2),
    "executor.cores": ("executor.cores", 4),
    "executor.memory": ("executor.memory", "16g"),
    "executor.task_cpus": ("executor.task_cpus", 2),
    "executor.env.NAME": ("executor.env.OTHER_VARIABLE", "1"),
    "driver.memory": ("driver.memory", "9g"),
    "driver.cores": ("driver.cores", 3),
    "gpu.per_executor": ("gpu.per_executor", 4),
    "gpu.per_task": ("gpu.per_task", 2),
    "gpu.discovery_script": ("gpu.discovery_script", "/opt/other-discovery.sh"),
    "gpu.reserve": ("gpu.reserve", "2g"),
    "gpu.placeholders": ("gpu.placeholders", True),
    "serializer.type": ("serializer.type", "java"),
    "serializer.kryo_buffer_max": ("serializer.kryo_buffer_max", "1024m"),
    "dynamic_allocation": ("dynamic_allocation", None),
    "job.kind": ("job.kind", "barrier"),
    "job.processes": ("job.processes", 8),
    "conf.NAME": ("conf.spark.sql.adaptive.enabled", "false"),
}


def _hints() -> dict[str, Any]:
    """Dotted field -> (type hint, default or MISSING)."""
    found: dict[str, Any] = {}

    def walk(cls: type, prefix: str) -> None:
        defaults = {f.name: f.default if f.default is not dataclasses.MISSING else
                    (f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
                    for f in dataclasses.fields(cls)}
        for name, hint in settable_fields(cls).items():
            inner, _ = unwrap_optional(hint)
            if dataclasses.is_dataclass(inner):
                walk(inner, f"{prefix}{name}.")
            else:
                key = f"{prefix}{name}" + (".NAME" if isinstance(defaults[name], dict) else "")
                found[key] = (hint, defaults[name])

    walk(PoolTemplate, "")
    return found


def _with(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """data with one field set (None: unset); a mapping field's key may hold dots (a Spark conf key)."""
    changed = copy.deepcopy(data)
    parts = dotted.split(".")
    for mapping in ("executor.env", "conf"):
        if dotted.startswith(mapping + "."):
            parts = [*mapping.split("."), dotted.removeprefix(mapping + ".")]
    *path, last = parts
    section = changed
    for part in path:
        section = section.setdefault(part, {})
    if value is None:
        section.pop(last, None)
    else:
        section[last] = value
    return changed


def _renders(data: dict[str, Any]) -> dict[str, str | None]:
    """Each target's output for the template, None where the target refuses it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TemplateWarning)
        template = build_template("reference", data)
        validate(template)
        outputs: dict[str, str | None] = {}
        for target in TARGETS:
            try:
                outputs[target] = render(template, target)
            except TemplateError:
                outputs[target] = None
    return outputs


def field_usage() -> dict[str, tuple[list[str], list[str]]]:
    """Dotted field -> (targets whose output changes with it, targets that refuse its changed value)."""
    reference = _renders(REFERENCE_TEMPLATE)
    refused = [target for target, output in reference.items() if output is None]
    if refused:
        raise ValueError(f"the reference template must render for every target; refused by {', '.join(refused)}")
    usage = {}
    for field in _hints():
        if field not in CHANGES:
            raise ValueError(f"template field {field} has no change in trainstack/docsite/template_reference.py "
                             "CHANGES: add one that keeps the reference template valid")
        dotted, value = CHANGES[field]
        try:
            changed = _renders(_with(REFERENCE_TEMPLATE, dotted, value))
        except TemplateError as exc:
            raise ValueError(f"CHANGES[{field!r}] makes the reference template invalid: {exc}") from None
        usage[field] = ([t for t in TARGETS if changed[t] is not None and changed[t] != reference[t]],
                        [t for t in TARGETS if changed[t] is None])
    return usage


def _spark_key(field: str) -> str:
    if field == "executor.env.NAME":
        return f"`{EXECUTOR_ENV_PREFIX}NAME`"
    if field == "conf.NAME":
        return "`NAME` itself"
    keys = [f"`{key.key}`" + (" (GPU templates)" if key.gpu_only else "") for key in SPARK_KEYS
            if key.template_field == field]
    return ", ".join(keys)


def _bounds(field: str) -> str:
    if field in COUNT_RANGES:
        low, high = COUNT_RANGES[field]
        return f"{low} to {high}"
    if field == "serializer.kryo_buffer_max":
        return f"below {KRYO_BUFFER_LIMIT_MIB}m"
    return ""


def _default(hint: Any, default: Any) -> str:
    if default is dataclasses.MISSING:
        return "required"
    if default is None or default == {}:
        return "unset"
    return f"`{str(default).lower() if isinstance(default, bool) else default}`"


def template_fields_table() -> str:
    """One row per field --set and the YAML accept."""
    usage = field_usage()
    rows = []
    for field, (hint, default) in _hints().items():
        used, refusing = usage[field]
        targets = ", ".join(used) or "none"
        if refusing:
            targets += f"; a changed value is refused by {', '.join(refusing)}"
        rows.append([f"`{field}`", describe(hint), _default(hint, default), _bounds(field), _spark_key(field),
                     targets])
    assert [row[0].strip("`") for row in rows] == override_keys(), "the fields and --set's keys differ"
    return markdown_table(["field", "type", "default", "bounds", "Spark conf", "targets whose output it changes"],
                          rows)
