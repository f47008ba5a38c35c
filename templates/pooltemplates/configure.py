"""A notebook's `%%configure` cell, from its words to the session's checked Spark conf: a Synapse / Livy session
body (what targets/synapse.py writes) or `--template NAME --set KEY=VALUE`, read into a pool template, checked with
the templates' rules, then sized to where the session runs (the pool the notebook is attached to, else the
machine's cores and memory under a local master). Every problem at once, each named by the cell's own words."""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .errors import Problem, TemplateError
from .loading import load_template
from .overrides import apply_overrides, parse_assignments
from .schema import SERIALIZER_CLASSES, PoolTemplate, owning_field
from .structure import build_template
from .units import parse_size
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
# Fabric's fields for its own workspace (learn.microsoft.com/fabric/data-engineering/author-execute-notebook,
# "Spark session configuration magic command"): nothing here has a lakehouse, mount point, pool or environment of
# Fabric's, so a cell carrying them runs as written, without them.
FABRIC_FIELDS = ("defaultLakehouse", "mountPoints", "useStarterPool", "useWorkspacePool", "environment",
                 "sessionTimeoutInSeconds")
KNOWN_FIELDS = (*SIZING_FIELDS, "conf", *CONF_FIELDS)
# Livy server's own settings in a session's conf (livy.rsc.sql.num-rows: the rows a %%sql cell shows).
LIVY_CONF_PREFIX = "livy."
# The template field a Livy field sets, for naming problems in the cell's own words.
LIVY_NAMES = {field: name for name, field in SIZING_FIELDS.items()}
TEMPLATE_NAMES = {field: field for field in SIZING_FIELDS.values()}
_SERIALIZER_TYPES = {cls: name for name, cls in SERIALIZER_CLASSES.items()}
SUBJECT = "%%configure"
# What a JVM gets when the cell says nothing of the driver's memory (Spark's default).
SPARK_DEFAULT_DRIVER_MEMORY = "1g"
# In the keys of Spark's GPU scheduling: spark.{driver,executor,task}.resource.gpu.{amount,discoveryScript}.
GPU_RESOURCE = ".resource.gpu."
BODY_EXAMPLE = 'a JSON object, e.g. {"numExecutors": 2, "executorMemory": "4g"}'


@dataclass(frozen=True)
class Room:
    """What a session under a local master may use: the cores and the bytes of memory (None: unknown) of the
    machine or container the notebook runs in."""

    cpus: int
    memory: int | None = None


@dataclass(frozen=True)
class NotebookSession:
    """A checked `%%configure` session: the template it was read into, the Spark conf it starts with, the task
    slots it asks for (executors × cores), the pool it runs on (None: a local master), and what the reader should
    know of it."""

    template: PoolTemplate
    conf: dict[str, str]
    slots: int
    pool: PoolTemplate | None = None
    notes: tuple[str, ...] = ()


def configure_session(room: Room, body: str = "", template: str | None = None, assignments: Sequence[str] = (),
                      pool: str | None = None) -> NotebookSession:
    """The session a `%%configure` cell asks for: its JSON `body`, or `template` with `assignments` (`--set
    KEY=VALUE`: a template setting, or a Spark conf key, which sets the template field that owns it); sized within
    `pool` (the name or file of the pool's template) when the notebook is attached to one, else within `room`.
    A body left empty asks for the defaults: the pool's executors, or one executor with every core of the room.
    Raises TemplateError naming every problem in the cell's own words."""
    pool_template = load_template(pool) if pool else None
    if template is not None:
        if not is_empty_body(body):
            raise TemplateError(SUBJECT, [Problem("--template", template, "a cell has either a JSON body or "
                                                  "--template", "one of them: the body's lines or --template NAME")])
        return size_session(_named_template(template, assignments), room, pool_template)
    if assignments:
        raise TemplateError(SUBJECT, [Problem("--set", assignments[0], "changes a template's setting",
                                              "--set together with --template NAME; a JSON body says it all")])
    fields, left_out = _without_foreign_settings({} if is_empty_body(body) else parse_body(body))
    session = size_session(template_from_body(fields, session_defaults(pool_template, room)), room, pool_template,
                           LIVY_NAMES)
    if left_out:
        note = (f"{', '.join(left_out)}: settings of Fabric's workspace or of Livy's server, which mean nothing "
                "outside them; the session starts without them")
        session = replace(session, notes=(note, *session.notes))
    return session


def _without_foreign_settings(fields: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The cell's fields without Fabric's workspace fields and Livy's own conf keys, and the names of those left
    out."""
    left_out = [name for name in FABRIC_FIELDS if name in fields]
    fields = {name: value for name, value in fields.items() if name not in left_out}
    if isinstance(fields.get("conf"), Mapping):
        livy_keys = [key for key in fields["conf"] if key.startswith(LIVY_CONF_PREFIX)]
        left_out += [f"conf.{key}" for key in livy_keys]
        fields["conf"] = {key: value for key, value in fields["conf"].items() if key not in livy_keys}
    return fields, left_out


def is_empty_body(body: str) -> bool:
    """A body of blank lines and `#` comments asks for nothing (JSON has no comments)."""
    return all(not line.strip() or line.lstrip().startswith("#") for line in body.splitlines())


def session_defaults(pool: PoolTemplate | None, room: Room) -> dict[str, Any]:
    """The sizing a cell that leaves it out gets: the pool's executors, or one executor with every core here."""
    if pool is not None:
        return {"numExecutors": pool.executor.instances, "executorCores": pool.executor.cores,
                "executorMemory": pool.executor.memory}
    return {"numExecutors": 1, "executorCores": room.cpus}


def size_session(template: PoolTemplate, room: Room, pool: PoolTemplate | None,
                 cell_names: Mapping[str, str] | None = None) -> NotebookSession:
    """The session for a checked template: within the pool's size, else within the room under a local master
    (which schedules no GPUs: the template's GPU scheduling keys are left out, else Spark would wait forever
    for GPUs to run its tasks on). A request larger than either is refused, not shrunk."""
    names = {**TEMPLATE_NAMES, **(cell_names or {})}
    problems = _pool_problems(template, pool, names) if pool is not None else _room_problems(template, room, names)
    if problems:
        raise TemplateError(SUBJECT, problems)
    conf = dict(template.spark_conf())
    slots = template.executor.instances * (template.executor.cores or 1)
    if pool is not None:
        conf["spark.cores.max"] = str(slots)
        return NotebookSession(template, conf, slots, pool)
    notes: tuple[str, ...] = ()
    gpu_keys = sorted(key for key in conf if GPU_RESOURCE in key)
    if gpu_keys:
        conf = {key: value for key, value in conf.items() if key not in gpu_keys}
        notes = (f"a local master schedules no GPUs, so the template's {', '.join(gpu_keys)} are left out (tasks "
                 "can still use this machine's GPUs; Spark's GPU scheduling needs a pool: invoke pool.up "
                 "--notebook)",)
    return NotebookSession(template, conf, slots, None, notes)


def _named_template(name: str, assignments: Sequence[str]) -> PoolTemplate:
    """A packaged template or file with the cell's `--set` assignments; a Spark conf key sets the template field
    that owns it (spark.executor.instances: executor.instances), any other goes into the template's conf."""
    overrides: dict[str, str] = {}
    set_names: dict[str, str] = {}
    for key, value in parse_assignments(assignments, example="executor.instances=2").items():
        field = (owning_field(key) or f"conf.{key}") if key.startswith("spark.") else key
        overrides[field] = value
        set_names[field] = key
    try:
        return load_template(name, overrides)
    except TemplateError as exc:
        raise TemplateError(SUBJECT, [_named_for_cell(problem, set_names) for problem in exc.problems]) from None


def _named_for_cell(problem: Problem, set_names: Mapping[str, str]) -> Problem:
    if problem.field == "template":
        return Problem("--template", problem.value, problem.rule, problem.valid)
    if problem.field in set_names:
        return Problem(f"--set {set_names[problem.field]}", problem.value, problem.rule, problem.valid)
    return problem


def _room_problems(template: PoolTemplate, room: Room, names: Mapping[str, str]) -> list[Problem]:
    instances, cores = template.executor.instances, template.executor.cores or 1
    problems = []
    if instances * cores > room.cpus:
        problems.append(Problem(f"{names['executor.instances']} × {names['executor.cores']}",
                                f"{instances} × {cores} = {instances * cores}",
                                f"this container has {room.cpus} cores, and a notebook's local master runs every "
                                "executor's tasks on them", f"at most {room.cpus} in all, or a notebook attached to "
                                "a pool (invoke pool.up --notebook)"))
    driver = parse_size(template.driver.memory or SPARK_DEFAULT_DRIVER_MEMORY).bytes
    executors = instances * parse_size(template.executor.memory).bytes if template.executor.memory else 0
    if room.memory is not None and driver + executors > room.memory:
        problems.append(Problem(f"{names['driver.memory']} + {names['executor.instances']} × "
                                f"{names['executor.memory']}",
                                f"{template.driver.memory or SPARK_DEFAULT_DRIVER_MEMORY} + {instances} × "
                                f"{template.executor.memory}", f"needs {_gib(driver + executors)}, more than this "
                                f"container's {_gib(room.memory)}", f"at most {_gib(room.memory)} in all"))
    return problems


def _pool_problems(template: PoolTemplate, pool: PoolTemplate, names: Mapping[str, str]) -> list[Problem]:
    problems = []
    limits = [("executor.instances", template.executor.instances, pool.executor.instances),
              ("executor.cores", template.executor.cores, pool.executor.cores)]
    for field, asked, most in limits:
        if asked is not None and most is not None and asked > most:
            problems.append(Problem(names[field], asked, f"the pool {pool.name!r} has {most}", f"at most {most}"))
    if template.executor.memory and pool.executor.memory and \
            parse_size(template.executor.memory).bytes > parse_size(pool.executor.memory).bytes:
        problems.append(Problem(names["executor.memory"], template.executor.memory,
                                f"the pool {pool.name!r} gives executors {pool.executor.memory}",
                                f"at most {pool.executor.memory}"))
    return problems


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB"


def parse_body(text: str) -> dict[str, Any]:
    """The cell's JSON object as Synapse and Fabric read it: `#` comment lines, `//` comments and trailing commas
    aside (Fabric's documented cell has all three), and a pipeline parameter (`{"activityParameterName": ...,
    "defaultValue": V}`) read as V, as Fabric does when a notebook runs on its own. Invalid JSON is named by line
    and column."""
    lines = "\n".join("" if line.lstrip().startswith("#") else line for line in text.splitlines())
    try:
        body = json.loads(_without_comments_and_trailing_commas(lines), object_hook=_parameter_default)
    except json.JSONDecodeError as exc:
        raise TemplateError(SUBJECT, [Problem("body", _line(text, exc.lineno), f"is not JSON: {exc.msg} at line "
                                              f"{exc.lineno} column {exc.colno}", BODY_EXAMPLE)])
    if not isinstance(body, dict):
        raise TemplateError(SUBJECT, [Problem("body", body, "is not a JSON object", BODY_EXAMPLE)])
    return body


def _without_comments_and_trailing_commas(text: str) -> str:
    """`text` without `//` comments (to the end of their line) and without a comma before `]` or `}`, outside
    strings; every line stays where it was, so that JSON's errors name the cell's own lines."""
    out: list[str] = []
    pending_comma = ""  # a comma, and what followed it, kept until the next token says whether it trails
    in_string = escaped = False
    i = 0
    while i < len(text):
        char = text[i]
        if in_string:
            out.append(char)
            in_string = escaped or char != '"'
            escaped = not escaped and char == "\\"
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif char == "," and not pending_comma:
            pending_comma = ","
        elif pending_comma and char.isspace():
            pending_comma += char
        else:
            if pending_comma:
                out.append(pending_comma if char not in "]}" else pending_comma[1:])
                pending_comma = ""
            out.append(char)
            in_string = char == '"'
        i += 1
    return "".join(out) + pending_comma


def _parameter_default(value: dict[str, Any]) -> Any:
    if set(value) == {"activityParameterName", "defaultValue"}:
        return value["defaultValue"]
    return value


def template_from_body(body: Mapping[str, Any], defaults: Mapping[str, Any], name: str = "notebook") -> PoolTemplate:
    """A validated one-node template from the cell's fields; `defaults` (Livy field -> value) fill the sizing
    fields the cell leaves out. Raises TemplateError listing every problem."""
    cell_names = dict(LIVY_NAMES)
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
