"""A flavor's Docker build context: the rendered Dockerfile, its requirement files and the files it copies."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

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
from trainstack.image.matrix import (
    PATCHED_COMPONENTS,
    PATCHES_DIR,
    REPO_ROOT,
    Flavor,
    Rule,
    applying_rules,
    component_patches,
    load_matrix,
)
from trainstack.image.requirements import framework_requirements, library_requirements, no_deps_requirements
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
    (out_dir / "requirements-frameworks.txt").write_text("\n".join(framework_requirements(flavor)) + "\n")
    (out_dir / "requirements-libraries.txt").write_text("\n".join(library_requirements(flavor)) + "\n")
    (out_dir / "requirements-no-deps.txt").write_text("".join(f"{line}\n" for line in no_deps_requirements(flavor)))
    (out_dir / "patches").mkdir()
    for patch in [patch for component in PATCHED_COMPONENTS for patch in component_patches(flavor, component)]:
        shutil.copyfile(PATCHES_DIR / patch, out_dir / "patches" / patch)
    (out_dir / BUILD_RECORD).write_text(json.dumps(build_record(flavor, load_matrix().rules), indent=2) + "\n")
    shutil.copytree(IMAGES_DIR / "scripts", out_dir / "scripts", ignore=_ignore_build_debris)
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


def build_record(flavor: Flavor, rules: list[Rule]) -> dict[str, Any]:
    """What the manifest records of the build beyond what the image holds: each patched component's patch files in
    the order the builder applies them, each with its sha256, and the ids of the rules that apply to the flavor."""
    patches = {component: [{"file": name, "sha256": hashlib.sha256((PATCHES_DIR / name).read_bytes()).hexdigest()}
                           for name in component_patches(flavor, component)]
               for component in PATCHED_COMPONENTS if component_patches(flavor, component)}
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
