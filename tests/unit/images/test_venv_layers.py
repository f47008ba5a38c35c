"""images/scripts/venv_layers.py on a small venv made here: each distribution's files go to its layer, the rest to
the layer that takes the rest, and two splits of equal venvs made at different times give the same bytes."""
from __future__ import annotations

import hashlib
import json
import os
import py_compile
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from trainstack.image.dockerfile import LAYER_MTIME
from trainstack.image.matrix import REPO_ROOT

SCRIPT = REPO_ROOT / "images" / "scripts" / "venv_layers.py"
SITE = "lib/python3.11/site-packages"
LAYERS = ["--mtime", str(LAYER_MTIME), "--layer", "first=alpha,beta-*", "--layer", "rest=*", "--layer", "last=gamma"]


def make_venv(root: Path) -> Path:
    """A venv-like tree: distributions alpha, beta-tools and gamma with RECORDs and timestamp pycs, a file of no
    distribution, an empty folder and a link."""
    venv = root / "venv"
    site = venv / SITE
    for distribution, module in (("alpha", "alpha"), ("beta_tools", "beta"), ("gamma", "gamma"), ("delta", "delta")):
        (site / module).mkdir(parents=True)
        source = site / module / "__init__.py"
        source.write_text(f"NAME = {module!r}\n")
        py_compile.compile(str(source), doraise=True)
        dist_info = site / f"{distribution}-1.0.dist-info"
        dist_info.mkdir()
        pyc = f"{module}/__pycache__/__init__.{sys.implementation.cache_tag}.pyc"
        (dist_info / "RECORD").write_text(f"{module}/__init__.py,,\n{pyc},,\n{dist_info.name}/RECORD,,\n")
    (venv / "bin").mkdir()
    (venv / "bin" / "tool").write_text("#!/bin/sh\n")
    (site / "alpha-1.0.dist-info" / "RECORD").open("a").write("../../../bin/tool,,\n")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "include").mkdir()
    os.symlink("lib", venv / "lib64")
    return venv


def without_pycs(venv: Path, distribution: str, module: str) -> None:
    """The distribution as the builder's pip installs it: no pyc, none in its RECORD."""
    shutil.rmtree(venv / SITE / module / "__pycache__")
    record = venv / SITE / f"{distribution}-1.0.dist-info" / "RECORD"
    record.write_text("".join(line for line in record.read_text().splitlines(keepends=True) if ".pyc" not in line))


def split(root: Path, out_name: str = "layers", pip_pycs: bool = True) -> tuple[Path, dict]:
    venv = make_venv(root)
    if not pip_pycs:
        without_pycs(venv, "gamma", "gamma")
    out, report_root = root / out_name, root / f"{out_name}-report"
    report = report_root / "etc" / "venv-layers.json"
    subprocess.run([sys.executable, str(SCRIPT), str(venv), str(venv / SITE), str(out), str(report),
                    "--report-root", str(report_root), *LAYERS], check=True, capture_output=True, text=True)
    assert {os.lstat(path).st_mtime for path in [report_root, *report_root.rglob("*")]} == {LAYER_MTIME}
    return out, json.loads(report.read_text())


def files_under(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*") if not path.is_dir() or path.is_symlink()}


def test_each_distribution_goes_to_its_layer_and_the_rest_to_the_catch_all(tmp_path):
    out, report = split(tmp_path)
    prefix = str(tmp_path / "venv").lstrip("/")
    first = {path.removeprefix(prefix + "/") for path in files_under(out / "first")}
    assert f"{SITE}/alpha/__init__.py" in first and f"{SITE}/beta/__init__.py" in first and "bin/tool" in first
    assert {path.removeprefix(prefix + "/") for path in files_under(out / "last")} == {
        f"{SITE}/gamma/__init__.py", f"{SITE}/gamma/__pycache__/__init__.{sys.implementation.cache_tag}.pyc",
        f"{SITE}/gamma-1.0.dist-info/RECORD"}
    rest = {path.removeprefix(prefix + "/") for path in files_under(out / "rest")}
    assert {"pyvenv.cfg", "lib64", f"{SITE}/delta/__init__.py"} <= rest
    assert (out / "rest" / prefix / "include").is_dir()
    assert report["first"]["distributions"] == ["alpha", "beta-tools"]
    assert report["rest"]["distributions"] == ["delta"] and report["last"]["distributions"] == ["gamma"]


def test_pycs_are_checked_hash_and_every_entry_has_one_mtime(tmp_path):
    out, _ = split(tmp_path)
    pyc = next(out.rglob("gamma/__pycache__/*.pyc"))
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b11  # hash-based, checked
    assert {os.lstat(path).st_mtime for path in out.rglob("*")} == {LAYER_MTIME}


def test_a_distribution_installed_without_pycs_gets_them_in_its_layer(tmp_path):
    out, _ = split(tmp_path, pip_pycs=False)
    pyc = next(out.rglob(f"gamma/__pycache__/__init__.{sys.implementation.cache_tag}.pyc"))
    assert pyc.is_relative_to(out / "last")
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b11


def layer_digests(out: Path) -> dict[str, str]:
    """Each layer folder as a sorted tar's sha256, as a layer's digest is its tar's."""
    digests = {}
    for layer in sorted(os.listdir(out)):
        archive = out.parent / f"{out.name}-{layer}.tar"
        with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted((out / layer).rglob("*")):
                tar.add(path, arcname=str(path.relative_to(out / layer)), recursive=False)
        digests[layer] = hashlib.sha256(archive.read_bytes()).hexdigest()
    return digests


def test_two_splits_of_the_same_venv_made_at_different_times_are_byte_identical(tmp_path):
    first, _ = split(tmp_path, "first-build")
    shutil.rmtree(tmp_path / "venv")
    time.sleep(1.1)  # the venv made again gets other mtimes, and its timestamp pycs record them
    second, _ = split(tmp_path, "second-build")
    assert layer_digests(first) == layer_digests(second)
    assert layer_digests(first).keys() == {"first", "rest", "last"}


def test_exactly_one_layer_must_take_the_rest(tmp_path):
    venv = make_venv(tmp_path)
    result = subprocess.run([sys.executable, str(SCRIPT), str(venv), str(venv / SITE), str(tmp_path / "out"),
                             str(tmp_path / "report.json"), "--mtime", "0", "--layer", "first=alpha"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "exactly one --layer takes what no other does: NAME=*" in result.stderr
