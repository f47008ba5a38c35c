"""A flavor's Docker build context: the rendered Dockerfile, its requirement files and the files it copies."""
from __future__ import annotations

import shutil
from pathlib import Path

from trainstack.image.dockerfile import IMAGES_DIR, horovod_patches, ipython_config, login_profile, render_dockerfile
from trainstack.image.matrix import REPO_ROOT, Flavor
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
    (out_dir / "requirements-frameworks.txt").write_text("\n".join(framework_requirements(flavor)) + "\n")
    (out_dir / "requirements-libraries.txt").write_text("\n".join(library_requirements(flavor)) + "\n")
    (out_dir / "requirements-no-deps.txt").write_text("".join(f"{line}\n" for line in no_deps_requirements(flavor)))
    (out_dir / "patches").mkdir()
    for patch in horovod_patches(flavor):
        shutil.copyfile(IMAGES_DIR / "patches" / patch, out_dir / "patches" / patch)
    shutil.copytree(IMAGES_DIR / "scripts", out_dir / "scripts", ignore=_ignore_build_debris)
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


def _ignore_build_debris(directory: str, names: list[str]) -> set[str]:
    return {name for name in names if name in {"__pycache__", "build", "dist"} or name.endswith(".egg-info")}


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        target.hardlink_to(source)
    except OSError:
        shutil.copyfile(source, target)
