"""Loads images/matrix.yaml into flavors, applies `--set` overrides and checks the rules."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from trainstack.errors import TrainstackError

REPO_ROOT = Path(__file__).resolve().parent.parent
MATRIX_PATH = REPO_ROOT / "images" / "matrix.yaml"


class MatrixError(TrainstackError):
    """The matrix, a flavor name or an override is not valid."""


@dataclass(frozen=True)
class Rule:
    id: str
    when: dict[str, str]
    require: dict[str, str]
    reason: str


@dataclass(frozen=True)
class Flavor:
    name: str
    description: str
    base_image: str
    components: dict[str, dict[str, Any]]
    python_packages: dict[str, str]
    no_deps_packages: frozenset[str] = frozenset()

    @property
    def gpu(self) -> bool:
        return "cuda" in self.components

    def version(self, component: str) -> str | None:
        entry = self.components.get(component)
        return None if entry is None else str(entry["version"])

    def field(self, component: str, name: str) -> Any:
        return self.components.get(component, {}).get(name)


@dataclass(frozen=True)
class Matrix:
    image_name: str
    flavors: dict[str, Flavor]
    rules: list[Rule]

    def flavor(self, name: str, overrides: Mapping[str, str] | None = None) -> Flavor:
        """The named flavor with overrides applied, refused if it breaks a rule."""
        if name not in self.flavors:
            raise MatrixError(f"flavor: unknown flavor {name!r}; valid: {', '.join(sorted(self.flavors))}")
        flavor = apply_overrides(self.flavors[name], overrides or {})
        broken = broken_rules(flavor, self.rules)
        if broken:
            raise MatrixError("\n".join(broken))
        return flavor


def load_matrix(path: Path = MATRIX_PATH) -> Matrix:
    raw = yaml.safe_load(path.read_text())
    flavors = {
        name: Flavor(
            name=name,
            description=" ".join(str(spec["description"]).split()),
            base_image=spec["base_image"],
            components={key: dict(value) for key, value in spec["components"].items()},
            python_packages={key: _package_version(value) for key, value in spec.get("python_packages", {}).items()},
            no_deps_packages=frozenset(
                key for key, value in spec.get("python_packages", {}).items() if isinstance(value, dict) and value.get("no_deps")
            ),
        )
        for name, spec in raw["flavors"].items()
    }
    rules = [
        Rule(id=r["id"], when=dict(r["when"]), require=dict(r["require"]), reason=" ".join(r["reason"].split()))
        for r in raw["rules"]
    ]
    matrix = Matrix(image_name=raw["image_name"], flavors=flavors, rules=rules)
    for rule in rules:
        for key, spec in {**rule.when, **rule.require}.items():
            _parse_specifier(spec, f"rule {rule.id}: {key}")
    return matrix


def _package_version(value: str | dict) -> str:
    return str(value["version"]) if isinstance(value, dict) else str(value)


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """Turns ['torch=2.10.0', 'base_image=x'] into a dict, refusing malformed pairs."""
    overrides: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not value:
            raise MatrixError(f"--set: {pair!r} is not KEY=VALUE (e.g. --set torch=2.10.0)")
        overrides[key.strip()] = value.strip()
    return overrides


def apply_overrides(flavor: Flavor, overrides: Mapping[str, str]) -> Flavor:
    """`base_image=IMG`, `COMPONENT=VERSION`, `COMPONENT.FIELD=VALUE` or `PACKAGE=VERSION` of python_packages."""
    components = copy.deepcopy(flavor.components)
    packages = dict(flavor.python_packages)
    base_image = flavor.base_image
    for key, value in overrides.items():
        component, _, field = key.partition(".")
        if key == "base_image":
            base_image = value
        elif component in components:
            if not field:
                _check_version(value, key)
            components[component][field or "version"] = value
        elif key in packages:
            _check_version(value, key)
            packages[key] = value
        else:
            valid = ["base_image", *components, *packages]
            raise MatrixError(
                f"--set {key}={value}: flavor {flavor.name!r} has no {key!r}; valid keys: {', '.join(valid)}"
            )
    return Flavor(flavor.name, flavor.description, base_image, components, packages, flavor.no_deps_packages)


def broken_rules(flavor: Flavor, rules: list[Rule]) -> list[str]:
    """One message per broken rule, naming the rule, the values and the reason."""
    messages = []
    for rule in rules:
        if not all(_matches(flavor, key, spec) for key, spec in rule.when.items()):
            continue
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
        return str(value) if value not in (None, "") else None
    return flavor.version(component)


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


def _check_version(value: str, key: str) -> None:
    try:
        Version(value)
    except InvalidVersion as exc:
        raise MatrixError(f"--set {key}={value}: {value!r} is not a version (e.g. 2.10.0)") from exc
