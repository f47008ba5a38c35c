"""A flavor's Docker build context: the rendered Dockerfile, what its builder's components copy and read (their
files, patches and requirement files), and the folders the image copies into / as they are: the script that ends each
RUN step (RUNTIME_OS_ROOT) and the image's own files with the record of the builder's patches (IMAGE_ROOT)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from trainrun import image_contract
from trainstack.image.components import BuildComponent, build_components
from trainstack.image.dockerfile import (
    ABSENT_PACKAGES_MODULE,
    ABSENT_PACKAGES_PTH,
    EXAMPLES_PTH,
    BUILD_RECORD_PATH,
    BUILDER_IMAGE,
    IMAGE_ROOT,
    IMAGE_STAGES_DOCKERFILE,
    IMAGES_DIR,
    LAYER_MTIME,
    REPRODUCIBLE_LAYER_SCRIPT,
    RUNTIME_OS_ROOT,
    SITE_HOOK_FILES,
    absent_packages_data,
    ipython_config,
    lab_settings_overrides,
    login_profile,
    render_dockerfile,
)
from trainstack.image.matrix import PATCHED_COMPONENTS, PATCHES_DIR, REPO_ROOT, Flavor, Rule, applying_rules, load_matrix
from trainstack.image.sources import SourceOptions


def write_build_context(flavor: Flavor, sources: SourceOptions, out_dir: Path, buildkit: bool = False) -> Path:
    """Writes the rendered Dockerfile and everything it copies into out_dir (replaced if present), for sources that
    sources.check_sources has passed; where `buildkit`, that Dockerfile is BuildKit's and IMAGE_STAGES_DOCKERFILE, the
    image's stages from BUILDER_IMAGE, is written beside it."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    (out_dir / "Dockerfile").write_text(render_dockerfile(flavor, sources, buildkit))
    if buildkit:
        (out_dir / IMAGE_STAGES_DOCKERFILE).write_text(
            render_dockerfile(flavor, sources, builder_image=BUILDER_IMAGE.format(flavor=flavor.name)))
    components = build_components(flavor, sources)
    (out_dir / "patches").mkdir()
    for component in components:
        _write_component_files(component, out_dir)
    # The image's scripts, for the builder's steps; the image's own copy is in IMAGE_ROOT.
    shutil.copytree(IMAGES_DIR / "scripts", out_dir / "scripts", ignore=_ignore_build_debris, dirs_exist_ok=True)
    runtime_os_root = out_dir / RUNTIME_OS_ROOT
    _copy_file(IMAGES_DIR / "scripts" / Path(REPRODUCIBLE_LAYER_SCRIPT).name,
               in_image(runtime_os_root, REPRODUCIBLE_LAYER_SCRIPT))
    _write_image_files(flavor, out_dir / IMAGE_ROOT)
    for root in (runtime_os_root, out_dir / IMAGE_ROOT):
        _normalize(root)
    wheelhouse = out_dir / "wheelhouse"
    wheelhouse.mkdir()
    if sources.wheelhouse:
        for wheel in sorted(sources.wheelhouse.glob("*.whl")):
            _link_or_copy(wheel, wheelhouse / wheel.name)
    if sources.ca_bundle:
        (out_dir / "build-ca").mkdir()
        shutil.copyfile(sources.ca_bundle, out_dir / "build-ca" / "ca-bundle.crt")
    return out_dir


def in_image(root: Path, path: str) -> Path:
    """Where a file at `path` in the image lies in one of the context's folders copied into / (root)."""
    return root / path.lstrip("/")


def _write_image_files(flavor: Flavor, root: Path) -> None:
    """The image's own files at their paths in the image, under root: the launcher's and templates' sources, the GPU
    discovery script, the examples, the image's scripts, the login shells' environment, the IPython config, JupyterLab's
    settings overrides, the build record and the site hooks."""
    for name, folder in image_contract.LOCAL_PACKAGE_DIRS.items():
        shutil.copytree(REPO_ROOT / name, in_image(root, folder), ignore=_ignore_build_debris)
    _copy_file(REPO_ROOT / "templates" / "pooltemplates" / "scripts" / "discover-gpus.sh",
               in_image(root, image_contract.DISCOVERY_SCRIPT_PATH))
    shutil.copytree(REPO_ROOT / "examples", in_image(root, image_contract.EXAMPLES_DIR), ignore=_ignore_build_debris)
    shutil.copytree(IMAGES_DIR / "scripts", in_image(root, image_contract.IMAGE_SCRIPTS_DIR),
                    ignore=_ignore_build_debris)
    for path, text in ((image_contract.LOGIN_PROFILE_PATH, login_profile()),
                       (f"{image_contract.VENV_DIR}/etc/ipython/ipython_config.py", ipython_config()),
                       (f"{image_contract.VENV_DIR}/share/jupyter/lab/settings/overrides.json",
                        lab_settings_overrides()),
                       (BUILD_RECORD_PATH, json.dumps(build_record(flavor, load_matrix().rules), indent=2) + "\n")):
        target = in_image(root, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    _write_site_packages(flavor, in_image(root, flavor.site_packages))


def _copy_file(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)


def _normalize(root: Path) -> None:
    """What COPY gives the image, made the same on every machine: folders 0755, files 0755 or 0644 as they are
    executable or not (whatever the clone's umask), and LAYER_MTIME for all (setting a path's mode or times leaves its
    folder's mtime as it is, so one pass does)."""
    for folder, dirs, files in os.walk(root):
        os.chmod(folder, 0o755)
        os.utime(folder, (LAYER_MTIME, LAYER_MTIME))
        for name in [*files, *(name for name in dirs if os.path.islink(os.path.join(folder, name)))]:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755 if os.stat(path).st_mode & 0o111 else 0o644)
            os.utime(path, (LAYER_MTIME, LAYER_MTIME), follow_symlinks=False)


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
    """The site hooks with their .pth files, for site-packages: those of every image, the examples folder's .pth, and
    the flavor's absent packages (the module and its data) where it lists any."""
    out_dir.mkdir(parents=True)
    for name in SITE_HOOK_FILES:
        shutil.copyfile(IMAGES_DIR / "site-packages" / name, out_dir / name)
    (out_dir / EXAMPLES_PTH).write_text(f"{image_contract.EXAMPLES_DIR}\n")
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
