"""Loads images/matrix.yaml into flavors, applies `--set` overrides and checks the rules.

The file and every flavor after its overrides are checked against images/matrix.schema.json (a JSON
Schema: the matrix stays plain data that the Jinja template and the rules read, and the schema, itself
data, says what each field may hold; jsonschema reports every violation with its path), then against
the rules, all before any docker call.
"""
from __future__ import annotations

import copy
import fnmatch
import functools
import json
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from pooltemplates import MAX_SHOWN, Problem, parse_assignments
from trainrun.image_contract import VENV_DIR
from trainstack.errors import TrainstackError

REPO_ROOT = Path(__file__).resolve().parents[2]
MATRIX_PATH = REPO_ROOT / "images" / "matrix.yaml"
SCHEMA_PATH = REPO_ROOT / "images" / "matrix.schema.json"
PATCHES_DIR = REPO_ROOT / "images" / "patches"
# Components whose matrix entry may list `patch` files: images/patches/COMPONENT-*.patch, applied in the builder.
PATCHED_COMPONENTS = ("horovod", "pyspark", "deepspeed", "ray")
FLAVOR_POINTER = "#/$defs/flavor"
VERSION_FIELD = {"$ref": "#/$defs/version"}
NOT_A_VERSION = "is not a version (PEP 440)"
# The venv layer that takes every distribution no other layer names.
VENV_LAYER_REST = "*"
VERSION_EXAMPLE = "a version, e.g. 2.10.0 or 2.13.0+cpu"


class MatrixError(TrainstackError):
    """The matrix, a flavor name or an override is not valid."""


@dataclass(frozen=True)
class Rule:
    id: str
    when: dict[str, str]
    require: dict[str, str]
    reason: str


@dataclass(frozen=True)
class VenvLayer:
    """One layer of the image's venv: the distributions its patterns name (`*`: every other one)."""

    name: str
    distributions: tuple[str, ...]
    reason: str
    # The component a flavor must have for the layer to be there (the nvidia layer: cuda).
    component: str | None = None

    @property
    def takes_the_rest(self) -> bool:
        return self.distributions == (VENV_LAYER_REST,)

    @property
    def argument(self) -> str:
        """NAME=PATTERN,... as images/scripts/venv_layers.py reads its --layer."""
        return f"{self.name}={','.join(self.distributions)}"


@dataclass(frozen=True)
class Flavor:
    name: str
    description: str
    base_image: str
    components: dict[str, dict[str, Any]]
    python_packages: dict[str, str]
    no_deps_packages: frozenset[str] = frozenset()
    # {"glob": ..., "reason": ...} entries: files the builder deletes from site-packages.
    prune: tuple[dict[str, str], ...] = ()
    # {"package": ..., "reason": ..., "instead": ...} entries: what this flavor cannot hold, and why.
    absent: tuple[dict[str, str], ...] = ()
    # The matrix's venv_layers, the same for every flavor (a distribution a flavor lacks just is not there).
    venv_layers: tuple[VenvLayer, ...] = ()

    @property
    def gpu(self) -> bool:
        return "cuda" in self.components

    def version(self, component: str) -> str | None:
        entry = self.components.get(component)
        return None if entry is None else str(entry["version"])

    def field(self, component: str, name: str) -> Any:
        return self.components.get(component, {}).get(name)

    def to_data(self) -> dict[str, Any]:
        """The flavor as it is written in the matrix (what the schema checks)."""
        packages = {name: {"version": version, "no_deps": True} if name in self.no_deps_packages else version
                    for name, version in self.python_packages.items()}
        data = {"description": self.description, "base_image": self.base_image,
                "components": copy.deepcopy(self.components), "python_packages": packages}
        if self.prune:
            data["prune"] = [dict(entry) for entry in self.prune]
        if self.absent:
            data["absent"] = [dict(entry) for entry in self.absent]
        return data

    def venv_layer_of(self, distribution: str) -> VenvLayer:
        """The venv layer a distribution's files go to, as images/scripts/venv_layers.py splits the venv in the
        builder: the first layer one of whose patterns names it (canonical names), else the one that takes the rest."""
        name = canonicalize_name(distribution)
        named = [layer for layer in self.venv_layers if not layer.takes_the_rest
                 and any(fnmatch.fnmatchcase(name, pattern) for pattern in layer.distributions)]
        return (named or [layer for layer in self.venv_layers if layer.takes_the_rest])[0]

    @property
    def prune_globs(self) -> list[str]:
        return [entry["glob"] for entry in self.prune]

    @property
    def site_packages(self) -> str:
        """The image venv's site-packages, for the flavor's Python."""
        return f"{VENV_DIR}/lib/python{self.version('python')}/site-packages"


@dataclass(frozen=True)
class Matrix:
    image_name: str
    flavors: dict[str, Flavor]
    rules: list[Rule]
    # Each patch file's upstream reference (the matrix's `patches`).
    patch_upstream: dict[str, str] = dataclasses.field(default_factory=dict)
    # Every venv layer, in the image's order; each flavor has those whose component it has.
    venv_layers: tuple[VenvLayer, ...] = ()

    def flavor(self, name: str, overrides: Mapping[str, str] | None = None) -> Flavor:
        """The named flavor with overrides applied, refused if it breaks a rule."""
        if name not in self.flavors:
            raise MatrixError.bad_option("--flavor", name, "is not a flavor", ", ".join(sorted(self.flavors)))
        flavor = apply_overrides(self.flavors[name], overrides or {})
        broken = broken_rules(flavor, self.rules)
        if broken:
            raise MatrixError("\n".join(broken))
        return flavor


def load_matrix(path: Path = MATRIX_PATH) -> Matrix:
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise MatrixError(f"{path.name}: not valid YAML: {exc}") from None
    problems = schema_problems(raw, "#")
    if problems:
        raise MatrixError(f"{path.name}: " + _listing(problems))
    venv_layers = tuple(VenvLayer(entry["name"], tuple(entry["distributions"]), " ".join(entry["reason"].split()),
                                  entry.get("component")) for entry in raw["venv_layers"])
    rest = [layer.name for layer in venv_layers if layer.takes_the_rest]
    if len(rest) != 1:
        raise MatrixError(str(Problem("venv_layers", rest, f"{len(rest)} layers take the rest ({VENV_LAYER_REST!r})",
                                      f"exactly one layer with distributions: [{VENV_LAYER_REST!r}]")))
    flavors = {name: _flavor(name, spec, venv_layers) for name, spec in raw["flavors"].items()}
    rules = [
        Rule(id=r["id"], when=dict(r["when"]), require=dict(r["require"]), reason=" ".join(r["reason"].split()))
        for r in raw["rules"]
    ]
    upstream = {patch: " ".join(entry["upstream"].split()) for patch, entry in raw.get("patches", {}).items()}
    matrix = Matrix(image_name=raw["image_name"], flavors=flavors, rules=rules, patch_upstream=upstream,
                    venv_layers=venv_layers)
    for rule in rules:
        for key, spec in {**rule.when, **rule.require}.items():
            _parse_specifier(spec, f"rule {rule.id}: {key}")
    return matrix


def _flavor(name: str, spec: dict[str, Any], venv_layers: tuple[VenvLayer, ...] = ()) -> Flavor:
    packages = spec.get("python_packages", {})
    return Flavor(
        name=name,
        description=" ".join(str(spec["description"]).split()),
        base_image=spec["base_image"],
        components={key: dict(value) for key, value in spec["components"].items()},
        python_packages={key: _package_version(value) for key, value in packages.items()},
        no_deps_packages=frozenset(key for key, value in packages.items()
                                   if isinstance(value, dict) and value.get("no_deps")),
        prune=tuple({"glob": entry["glob"], "reason": " ".join(entry["reason"].split())}
                    for entry in spec.get("prune", [])),
        absent=tuple({"package": entry["package"], "reason": " ".join(entry["reason"].split()),
                      "instead": " ".join(entry["instead"].split())} for entry in spec.get("absent", [])),
        venv_layers=tuple(layer for layer in venv_layers
                          if layer.component is None or layer.component in spec["components"]),
    )


@functools.cache
def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def schema_problems(data: Any, pointer: str, prefix: str = "") -> list[str]:
    """Every violation of the schema (or of its definition at `pointer`: "#" or FLAVOR_POINTER), one line each,
    named by path; one per path, a missing patch file's (with the valid names) before the schema's."""
    schema = _schema()
    if pointer != "#":
        schema = {"$defs": schema["$defs"], "$ref": pointer}
    validator = jsonschema.Draft202012Validator(schema)
    flavors = data.get("flavors", {}) if pointer == "#" and isinstance(data, dict) else {}
    problems = {} if pointer != FLAVOR_POINTER else _patch_problems(data, prefix)
    for name, spec in flavors.items():
        problems.update(_patch_problems(spec, f"{prefix}flavors.{name}."))
    if pointer == "#" and isinstance(data, dict):
        problems.update(_upstream_problems(data, prefix))
    for error in sorted(validator.iter_errors(data), key=lambda error: list(map(str, error.absolute_path))):
        where = prefix + ".".join(str(part) for part in error.absolute_path) or "the matrix"
        problems.setdefault(where, str(Problem(where, error.instance, *_explain(error))))
    return list(problems.values())


def _explain(error: jsonschema.ValidationError) -> tuple[str, str]:
    """(rule, valid) of a schema violation; valid is the field's description where the schema has one."""
    valid = error.schema.get("description", "see images/matrix.schema.json")
    if error.validator == "enum":
        return "is not an allowed value", ", ".join(map(str, error.validator_value))
    if error.validator == "pattern" and "description" in error.schema:
        # The description's example once, in `valid`.
        return f"is not {valid.partition(', e.g.')[0]}", f"{valid}, with no whitespace, quotes or shell metacharacters"
    if error.validator == "type":
        return f"is not of type {error.validator_value}", valid
    if error.validator == "maxLength":
        return f"is longer than {error.validator_value} characters", valid
    # jsonschema's own message, which may quote the whole value: cut like the value itself.
    return error.message[:2 * MAX_SHOWN], valid


def _patch_problems(spec: Any, prefix: str) -> dict[str, str]:
    """Patches that are not the bare name of a file in images/patches/ for their component
    (COMPONENT-*.patch), by path."""
    components = spec.get("components", {}) if isinstance(spec, dict) else {}
    problems = {}
    for component in PATCHED_COMPONENTS:
        entry = components.get(component, {})
        patches = entry.get("patch", []) if isinstance(entry, dict) else []
        available = component_patch_files(component)
        for index, patch in enumerate(patches if isinstance(patches, list) else []):
            if patch not in available:
                where = f"{prefix}components.{component}.patch.{index}"
                problems[where] = str(Problem(where, patch, "is not a file in images/patches/", ", ".join(available)))
    return problems


def component_patches(flavor: Flavor, component: str) -> list[str]:
    """The matrix's `patch` of a component (horovod, pyspark, deepspeed, ray): one file name or a list of them,
    applied in order."""
    patches = flavor.field(component, "patch") or []
    return [patches] if isinstance(patches, str) else list(patches)


def component_patch_files(component: str) -> list[str]:
    """The patch files in images/patches/ for a component (named COMPONENT-VERSION-WHAT.patch)."""
    return sorted(path.name for path in PATCHES_DIR.glob(f"{component}-*.patch"))


def _upstream_problems(data: dict[str, Any], prefix: str) -> dict[str, str]:
    """Patches a flavor applies without an upstream reference in `patches`, and references to no file."""
    upstream = data.get("patches") if isinstance(data.get("patches"), dict) else {}
    problems = {}
    for spec in (data.get("flavors") or {}).values():
        components = spec.get("components", {}) if isinstance(spec, dict) else {}
        for component in PATCHED_COMPONENTS:
            entry = components.get(component, {})
            patches = entry.get("patch", []) if isinstance(entry, dict) else []
            for patch in patches if isinstance(patches, list) else []:
                if isinstance(patch, str) and patch not in upstream:
                    where = f"{prefix}patches.{patch}"
                    problems[where] = str(Problem(where, patch, "is applied by a flavor but has no upstream "
                                                  "reference", "an entry {upstream: ISSUE, PR or JIRA, or why "
                                                  "none is filed} under patches"))
    available = {name for component in PATCHED_COMPONENTS for name in component_patch_files(component)}
    for patch in upstream:
        if patch not in available:
            where = f"{prefix}patches.{patch}"
            problems[where] = str(Problem(where, patch, "is not a file in images/patches/",
                                          ", ".join(sorted(available))))
    return problems


def _listing(problems: list[str]) -> str:
    return problems[0] if len(problems) == 1 else f"{len(problems)} problems:\n  " + "\n  ".join(problems)


def _package_version(value: str | dict) -> str:
    return str(value["version"]) if isinstance(value, dict) else str(value)


def check_base_image(option: str, value: str) -> str:
    """A base image given outside --set (--base-image, $TRAINSTACK_BASE_IMAGE), checked as the schema checks the
    matrix's and named as it was given."""
    problems = schema_problems(value, "#/$defs/image_reference", prefix=option)
    if problems:
        raise MatrixError(_listing(problems))
    return value


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """Turns ['torch=2.10.0', 'base_image=x'] into a dict, refusing malformed pairs."""
    return {key: value.strip() for key, value in parse_assignments(pairs, example="torch=2.10.0").items()}


def apply_overrides(flavor: Flavor, overrides: Mapping[str, str]) -> Flavor:
    """`base_image=IMG`, `COMPONENT=VERSION`, `COMPONENT.FIELD=VALUE` (a list field takes `a,b`) or
    `PACKAGE=VERSION` of python_packages, each typed and checked as the schema says, naming the `--set` key;
    a version must also be one pip reads (PEP 440)."""
    data = flavor.to_data()
    components, packages = data["components"], data["python_packages"]
    unknown, problems = [], []
    for key, value in overrides.items():
        component, _, field = key.partition(".")
        field = field or "version"
        if key == "base_image":
            data["base_image"] = value
        elif component in components:
            fields = _component_fields(component)
            if field not in fields:
                problems.append(str(Problem(f"--set {key}", value, f"{component} has no field {field!r}",
                                            ", ".join(f"{component}.{name}" for name in fields))))
            elif fields[field] == VERSION_FIELD and not _is_version(value):
                problems.append(str(Problem(f"--set {component}.{field}", value, NOT_A_VERSION, VERSION_EXAMPLE)))
            else:
                components[component][field] = _typed(fields[field], value)
        elif key in packages:
            if not _is_version(value):
                problems.append(str(Problem(f"--set {key}", value, NOT_A_VERSION, VERSION_EXAMPLE)))
            else:
                packages[key] = {**packages[key], "version": value} if isinstance(packages[key], dict) else value
        else:
            unknown.append(key)
    if unknown:
        valid = ", ".join(["base_image", *components, *(f"{name}.FIELD" for name in components), *packages])
        raise MatrixError(_listing([str(Problem("--set", key, f"is not a key of flavor {flavor.name!r}", valid))
                                    for key in unknown]))
    problems += [problem.replace("--set components.", "--set ", 1)
                 for problem in schema_problems(data, FLAVOR_POINTER, prefix="--set ")]
    if problems:
        raise MatrixError(_listing(problems))
    return _flavor(flavor.name, data, flavor.venv_layers)


def _component_fields(component: str) -> dict[str, Any]:
    """The schema of each field of a component."""
    schema = _schema()["$defs"]["components"]["properties"][component]
    if "$ref" in schema:
        schema = _schema()["$defs"][schema["$ref"].rpartition("/")[2]]
    return schema["properties"]


def _typed(field_schema: Mapping[str, Any], text: str) -> Any:
    """An override as its field's schema type: `a,b` for an array (of integers where its items are)."""
    if field_schema.get("type") == "array":
        items = [item.strip() for item in text.split(",") if item.strip()]
        integers = field_schema.get("items", {}).get("type") == "integer"
        return [int(item) if integers and item.isdigit() else item for item in items]
    return text


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def applying_rules(flavor: Flavor, rules: list[Rule]) -> list[Rule]:
    """The rules whose every `when` the flavor matches: those whose requires it must meet."""
    return [rule for rule in rules if all(_matches(flavor, key, spec) for key, spec in rule.when.items())]


def broken_rules(flavor: Flavor, rules: list[Rule]) -> list[str]:
    """One message per broken rule, naming the rule, the values and the reason."""
    messages = []
    for rule in applying_rules(flavor, rules):
        failed = {key: spec for key, spec in rule.require.items() if not _matches(flavor, key, spec)}
        if failed:
            context = ", ".join(f"{key} {_value(flavor, key) or '(absent)'}" for key in rule.when)
            wanted = ", ".join(f"{key} {spec} (has {_value(flavor, key) or 'none'})" for key, spec in failed.items())
            messages.append(
                f"rule {rule.id}: flavor {flavor.name!r} with {context} needs {wanted}. {rule.reason}"
            )
    return messages


def _value(flavor: Flavor, key: str) -> str | None:
    component, _, field = key.partition(".")
    if field:
        value = flavor.field(component, field)
        return str(value) if value not in (None, "", []) else None
    return flavor.version(component) or flavor.python_packages.get(component)


def _matches(flavor: Flavor, key: str, spec: str) -> bool:
    value = _value(flavor, key)
    if value is None:
        return False
    if spec == "*":
        return True
    return _parse_specifier(spec, key).contains(Version(value), prereleases=True)


def _parse_specifier(spec: str, where: str) -> SpecifierSet | None:
    if spec == "*":
        return None
    try:
        return SpecifierSet(spec)
    except InvalidSpecifier as exc:
        raise MatrixError(f"{where}: {spec!r} is not a version specifier such as '>=2.1,<3'") from exc

