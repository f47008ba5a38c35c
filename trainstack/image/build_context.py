"""A flavor's Docker build context: the rendered Dockerfile, what its builder's components copy and read (their
files, patches and requirement files), the record of those patches, and what the image's last stage copies."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from trainstack.image.components import BuildComponent, build_components
from trainstack.image.dockerfile import (
    ABSENT_PACKAGES_MODULE,
    ABSENT_PACKAGES_PTH,
    BUILD_RECORD,
    IMAGES_DIR,
    SITE_HOOK_FILES,
    absent_packages_data,
    ipython_config,
    lab_settings_overrides,
    login_profile,
    render_dockerfile,
)
from trainstack.image.matrix import PATCHED_COMPONENTS, PATCHES_DIR, REPO_ROOT, Flavor, Rule, applying_rules, load_matrix
from trainstack.image.sources import SourceOptions


def write_build_context(flavor: Flavor, sources: SourceOptions, out_dir: Path) -> Path:
    """Writes the rendered Dockerfile and everything it copies into out_dir (replaced if present), for sources
    that sources.check_sources has passed."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    (out_dir / "Dockerfile").write_text(render_dockerfile(flavor, sources))
    (out_dir / "login-profile.sh").write_text(login_profile())
    (out_dir / "ipython_config.py").write_text(ipython_config())
    (out_dir / "lab-overrides.json").write_text(lab_settings_overrides())
    components = build_components(flavor, sources)
    (out_dir / "patches").mkdir()
    for component in components:
        _write_component_files(component, out_dir)
    (out_dir / BUILD_RECORD).write_text(json.dumps(build_record(flavor, load_matrix().rules), indent=2) + "\n")
    # The image's own scripts, all of them: its last stage copies the folder.
    shutil.copytree(IMAGES_DIR / "scripts", out_dir / "scripts", ignore=_ignore_build_debris, dirs_exist_ok=True)
    _write_site_packages(flavor, out_dir / "site-packages")
    shutil.copytree(REPO_ROOT / "launcher", out_dir / "launcher", ignore=_ignore_build_debris)
    shutil.copytree(REPO_ROOT / "examples", out_dir / "examples", ignore=_ignore_build_debris)
    shutil.copytree(REPO_ROOT / "templates", out_dir / "templates", ignore=_ignore_build_debris)
    wheelhouse = out_dir / "wheelhouse"
    wheelhouse.mkdir()
    if sources.wheelhouse:
        for wheel in sorted(sources.wheelhouse.glob("*.whl")):
            _link_or_copy(wheel, wheelhouse / wheel.name)
    if sources.ca_bundle:
        (out_dir / "build-ca").mkdir()
        shutil.copyfile(sources.ca_bundle, out_dir / "build-ca" / "ca-bundle.crt")
    return out_dir


def _write_component_files(component: BuildComponent, out_dir: Path) -> None:
    """What a component's steps copy and read: its requirement files, its files of images/ and its patches."""
    for name, text in component.written_files.items():
        (out_dir / name).write_text(text)
    for path in component.files:
        (out_dir / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(IMAGES_DIR / path, out_dir / path)
    for patch in component.patches:
        shutil.copyfile(PATCHES_DIR / patch, out_dir / "patches" / patch)


def build_record(flavor: Flavor, rules: list[Rule]) -> dict[str, Any]:
    """What the manifest records of the build beyond what the image holds: each patched component's patch files in
    the order the builder applies them, each with its sha256, and the ids of the rules that apply to the flavor."""
    applied = {component.name: component.patches for component in build_components(flavor) if component.patches}
    # Keyed in matrix.PATCHED_COMPONENTS' order, as the patches page lists them: the record, and the image layer
    # that copies it, do not change when the builder's order does.
    patches = {name: [{"file": patch, "sha256": hashlib.sha256((PATCHES_DIR / patch).read_bytes()).hexdigest()}
                      for patch in applied[name]] for name in PATCHED_COMPONENTS if name in applied}
    return {"patches": patches, "rules": [rule.id for rule in applying_rules(flavor, rules)]}


def _write_site_packages(flavor: Flavor, out_dir: Path) -> None:
    """The site hooks with their .pth files, for the Dockerfile's COPY into site-packages: those of every image,
    and the flavor's absent packages (the module and its data) where it lists any."""
    out_dir.mkdir()
    for name in SITE_HOOK_FILES:
        shutil.copyfile(IMAGES_DIR / "site-packages" / name, out_dir / name)
    if not flavor.absent:
        return
    module = f"{ABSENT_PACKAGES_MODULE}.py"
    shutil.copyfile(IMAGES_DIR / "site-packages" / module, out_dir / module)
    (out_dir / f"{ABSENT_PACKAGES_MODULE}.json").write_text(absent_packages_data(flavor))
    (out_dir / ABSENT_PACKAGES_PTH).write_text(f"import {ABSENT_PACKAGES_MODULE}\n")


def _ignore_build_debris(directory: str, names: list[str]) -> set[str]:
    return {name for name in names if name in {"__pycache__", "build", "dist"} or name.endswith(".egg-info")}


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        target.hardlink_to(source)
    except OSError:
        shutil.copyfile(source, target)
