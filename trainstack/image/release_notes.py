"""Release notes between two images, as Markdown, from what each image records of itself: its manifest
(/etc/trainstack/manifest.json: versions, and the patches and matrix rules of its build) and its SBOM
(/etc/trainstack/sbom.cdx.json: every component). `invoke release-notes FROM TO` prints them.

release_notes() is pure (golden-tested from hand-made manifests and SBOMs); read_release_image() reads one image's
from the docker engine. An image built before its manifest recorded patches and rules gets "not recorded" there,
never "no change".
"""
from __future__ import annotations

import json
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import docker
import docker.errors

from trainrun.image_contract import MANIFEST_PATH
from trainstack import docker_client
from trainstack.errors import TrainstackError, bad_value
from trainstack.image.docs import markdown_table
from trainstack.image.sbom import LOCAL_REF_PREFIX, read_image_sbom

# How each kind of SBOM component is named in the notes: a purl's type, the project's own distributions, the OS.
COMPONENT_KINDS = {"pypi": "Python", "deb": "Debian", "local": "trainstack", "os": "OS"}
# A patch's sha256 in the notes: its first digits, enough to tell two versions of one file apart.
SHA256_SHOWN = 12
NONE = "—"
Key = TypeVar("Key", bound=Hashable)


@dataclass(frozen=True)
class ReleaseImage:
    """One side of the notes: how it was named, what docker knows of it (where known), its manifest and SBOM."""

    reference: str
    manifest: dict[str, Any]
    sbom: dict[str, Any]
    image_id: str | None = None
    digests: tuple[str, ...] = ()


@dataclass(frozen=True)
class Change(Generic[Key]):
    """One row of the notes: what changed, its value before (None: absent) and after."""

    key: Key
    old: str | None
    new: str | None

    @property
    def kind(self) -> str:
        return "added" if self.old is None else "removed" if self.new is None else "changed"


def release_notes(old: ReleaseImage, new: ReleaseImage) -> str:
    """The notes from `old` to `new`: the references, then versions, patches, rules and SBOM components that
    changed."""
    lines = [f"# Release notes: `{old.reference}` → `{new.reference}`", "", _images_table(old, new), ""]
    versions = changes(manifest_versions(old.manifest), manifest_versions(new.manifest))
    lines += ["## Versions", "", _changes_table(["", "from", "to"], versions) if versions else "No version changed.",
              ""]
    lines += ["## Patches", "", _patches_section(old, new), ""]
    lines += ["## Matrix rules", "", _rules_section(old, new), ""]
    lines += ["## Components (SBOM)", "", *_components_section(old, new)]
    return "\n".join(lines) + "\n"


def changes(old: dict[Key, str], new: dict[Key, str]) -> list[Change[Key]]:
    """Each key whose value differs, is added or is removed, in `old`'s order then `new`'s."""
    keys = [*old, *(key for key in new if key not in old)]
    return [Change(key, old.get(key), new.get(key)) for key in keys if old.get(key) != new.get(key)]


def manifest_versions(manifest: dict[str, Any]) -> dict[str, str]:
    """What a manifest records as versions, by name: Python, the OS, each package and library (those it found),
    and each section of Horovod's build."""
    os_release = manifest.get("os") or {}
    versions = {
        "python": manifest.get("python"),
        "os": " ".join(part for part in (os_release.get("id"), os_release.get("version_id")) if part)
              + (f" ({os_release['codename']})" if os_release.get("codename") else ""),
        **dict(sorted((manifest.get("packages") or {}).items())),
        **dict(sorted((manifest.get("libraries") or {}).items())),
        **{f"horovod {section.replace('_', ' ')}": ", ".join(sorted(names))
           for section, names in sorted((manifest.get("horovod") or {}).items())},
    }
    return {name: str(version) for name, version in versions.items() if version}


def manifest_patches(manifest: dict[str, Any], origin: str) -> dict[tuple[str, str], str] | None:
    """(component, file) -> sha256 of each patch the manifest records; None when it records none (an image built
    before manifests had `patches`)."""
    if "patches" not in manifest:
        return None
    patches = manifest["patches"]
    if not isinstance(patches, dict) or not all(
            isinstance(entries, list) and all(isinstance(entry, dict) and isinstance(entry.get("file"), str)
                                              and isinstance(entry.get("sha256"), str) for entry in entries)
            for entries in patches.values()):
        raise bad_value(f"{origin} patches", patches, "is not a patch list by component",
                        '{"horovod": [{"file": "horovod-....patch", "sha256": "<64 hex>"}], ...}')
    return {(component, entry["file"]): entry["sha256"]
            for component, entries in sorted(patches.items()) for entry in entries}


def manifest_rules(manifest: dict[str, Any], origin: str) -> list[str] | None:
    """The ids of the matrix rules that applied to the build; None when the manifest records none."""
    if "rules" not in manifest:
        return None
    rules = manifest["rules"]
    if not isinstance(rules, list) or not all(isinstance(rule, str) for rule in rules):
        raise bad_value(f"{origin} rules", rules, "is not a list of rule ids", '["tensorflow-2.21-python", ...]')
    return rules


def sbom_components(sbom: dict[str, Any], origin: str) -> dict[tuple[str, str], str]:
    """(kind, name) -> version of each SBOM component (versions joined where one name is listed more than once,
    as a package of two architectures)."""
    versions: dict[tuple[str, str], list[str]] = {}
    for index, component in enumerate(sbom.get("components", [])):
        if not isinstance(component, dict) or not isinstance(component.get("name"), str):
            raise bad_value(f"{origin} components.{index}", component, "is not a component with a name",
                            'a CycloneDX component such as {"name": "numpy", "version": "2.4.6", ...}')
        versions.setdefault((_component_kind(component), component["name"]), []).append(
            str(component.get("version", "")))
    return {key: ", ".join(sorted(set(found))) for key, found in sorted(versions.items())}


def _component_kind(component: dict[str, Any]) -> str:
    purl = str(component.get("purl", ""))
    if purl.startswith("pkg:"):
        kind = purl[len("pkg:"):].partition("/")[0]
    elif str(component.get("bom-ref", "")).startswith(LOCAL_REF_PREFIX):
        kind = "local"
    elif component.get("type") == "operating-system":
        kind = "os"
    else:
        kind = str(component.get("type", "other"))
    return COMPONENT_KINDS.get(kind, kind)


def _images_table(old: ReleaseImage, new: ReleaseImage) -> str:
    rows = [["reference", f"`{old.reference}`", f"`{new.reference}`"],
            ["flavor", str(old.manifest.get("flavor", NONE)), str(new.manifest.get("flavor", NONE))]]
    if old.image_id or new.image_id:
        rows.append(["image ID", *(_code(image.image_id) for image in (old, new))])
    if old.digests or new.digests:
        rows.append(["digests", *(", ".join(f"`{digest}`" for digest in image.digests) or NONE
                                  for image in (old, new))])
    return markdown_table(["", "from", "to"], rows)


def _changes_table(header: list[str], rows: list[Change[str]]) -> str:
    return markdown_table(header, [[row.key, _code(row.old), _code(row.new)] for row in rows])


def _code(text: str | None) -> str:
    """A version as inline code: Debian's `~` would strike text through in GitHub's Markdown."""
    return f"`{text}`" if text else NONE


def _patches_section(old: ReleaseImage, new: ReleaseImage) -> str:
    before, after = (manifest_patches(image.manifest, image.reference) for image in (old, new))
    if before is None or after is None:
        return _not_recorded("patches", old, new, before, after)
    found = changes(before, after)
    if not found:
        return "No patch changed."
    return markdown_table(["component", "patch", "change", "sha256 from", "sha256 to"],
                          [[row.key[0], f"`{row.key[1]}`", row.kind,
                            *(_code(sha and sha[:SHA256_SHOWN]) for sha in (row.old, row.new))]
                           for row in sorted(found, key=lambda row: row.key)])


def _rules_section(old: ReleaseImage, new: ReleaseImage) -> str:
    before, after = (manifest_rules(image.manifest, image.reference) for image in (old, new))
    if before is None or after is None:
        return _not_recorded("rules", old, new, before, after)
    added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
    if not added and not removed:
        return f"No rule added or removed ({len(after)} apply)."
    return "\n".join([*(f"- added: `{rule}`" for rule in added), *(f"- removed: `{rule}`" for rule in removed)])


def _not_recorded(field: str, old: ReleaseImage, new: ReleaseImage, before: Any, after: Any) -> str:
    missing = list(dict.fromkeys(f"`{image.reference}`" for image, value in ((old, before), (new, after))
                                 if value is None))
    whose = (f"the manifest of {missing[0]} has" if len(missing) == 1
             else f"the manifests of {' and '.join(missing)} have")
    return f"Not recorded: {whose} no `{field}` (built before manifests recorded them), so their changes are unknown."


def _components_section(old: ReleaseImage, new: ReleaseImage) -> list[str]:
    before, after = (sbom_components(image.sbom, f"{image.reference} SBOM") for image in (old, new))
    found = changes(before, after)
    by_kind = {kind: sorted((row for row in found if row.kind == kind), key=lambda row: row.key)
               for kind in ("added", "removed", "changed")}
    lines = [f"{len(before)} components in `from`, {len(after)} in `to`: {len(by_kind['added'])} added, "
             f"{len(by_kind['removed'])} removed, {len(by_kind['changed'])} changed.", ""]
    for kind, rows in by_kind.items():
        if not rows:
            continue
        header = ["component", "kind", *(["from", "to"] if kind == "changed" else ["version"])]
        lines += [f"### {kind.capitalize()}", "", markdown_table(header, [
            [row.key[1], row.key[0],
             *([_code(row.old), _code(row.new)] if kind == "changed" else [_code(row.new or row.old)])]
            for row in rows]), ""]
    return lines[:-1]


def read_release_image(client: docker.DockerClient, option: str, reference: str, image_name: str) -> ReleaseImage:
    """An image of this daemon's, with its manifest and SBOM; one not here is refused, naming the `image_name`
    images that are."""
    try:
        image = client.images.get(reference)
    except docker.errors.ImageNotFound:
        known = docker_client.local_references(client, image_name)
        raise bad_value(option, reference, "is not an image here",
                        ", ".join(known) or f"none: no {image_name} image is here (`invoke build` or "
                                            f"`docker pull` one)") from None
    status, text = docker_client.run_in_image(client, reference, ["cat", MANIFEST_PATH])
    if status != 0:
        raise TrainstackError(f"{reference} has no {MANIFEST_PATH}: not a trainstack image, or built before "
                              "images had manifests")
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TrainstackError(f"{reference}:{MANIFEST_PATH} is not JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise TrainstackError(f"{reference}:{MANIFEST_PATH} is not a JSON object")
    return ReleaseImage(reference, manifest, read_image_sbom(client, reference), image.id,
                        tuple(sorted(image.attrs.get("RepoDigests") or [])))
