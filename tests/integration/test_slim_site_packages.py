"""images/scripts/slim_site_packages.py on shared libraries compiled here: what it strips, what it keeps, and the
prunes it refuses."""
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainstack.image.matrix import REPO_ROOT

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("strip") and shutil.which("objcopy")),
                                reason="needs gcc and binutils")

SOURCE = "int helper(int x) { return x * 3; }\nint visible(int x) { return helper(x) + 1; }\n"


@pytest.fixture(scope="module")
def slim():
    spec = importlib.util.spec_from_file_location("slim_site_packages", REPO_ROOT / "images/scripts/slim_site_packages.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def compile_library(folder: Path, name: str, needs: Path | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / f"{name}.c"
    source.write_text(SOURCE.replace("visible", f"visible_{name}"))
    library = folder / f"lib{name}.so"
    link = [f"-L{needs.parent}", f"-l{needs.name[3:-3]}", "-Wl,--no-as-needed"] if needs else []
    subprocess.run(["gcc", "-g", "-O1", "-shared", "-fPIC", "-Wl,--no-as-needed", "-o", str(library), str(source), *link],
                   check=True)
    return library


def test_a_library_with_debug_info_is_stripped_and_still_loads(slim, tmp_path):
    library = compile_library(tmp_path, "kernels")
    before = library.stat().st_size
    fingerprint = slim.ElfFile.read(library).loaded_fingerprint()
    result = slim.strip_library(library)
    assert result.kept_because is None and result.saved > 0
    assert library.stat().st_size == before - result.saved
    assert slim.ElfFile.read(library).loaded_fingerprint() == fingerprint
    assert slim.loads(library)
    assert not list(tmp_path.glob(".*.stripped"))


def test_a_strip_that_changes_a_loaded_section_keeps_the_original(slim, tmp_path, monkeypatch):
    library = compile_library(tmp_path, "kernels")
    original = library.read_bytes()
    monkeypatch.setattr(slim, "strip_command", lambda source, target: [
        "objcopy", "--strip-debug", "--remove-section=.gnu.hash", str(source), str(target)])
    result = slim.strip_library(library)
    assert result.saved == 0 and result.kept_because == "stripping would change a loaded section or segment"
    assert library.read_bytes() == original


def test_pruning_a_library_another_one_links_fails_and_names_both(slim, tmp_path, capsys):
    needed = compile_library(tmp_path / "nvidia/solver/lib", "solver")
    compile_library(tmp_path / "torch/lib", "frontend", needs=needed)
    assert slim.slim(tmp_path, ["nvidia/**/libsolver.so"], workers=1) == 1
    out = capsys.readouterr().out
    assert out.startswith("error: a pruned library is still linked: ")
    assert "torch/lib/libfrontend.so needs libsolver.so" in out


def test_slim_prunes_and_strips_then_check_passes(slim, tmp_path, capsys):
    compile_library(tmp_path / "nvidia/solver/lib", "solver")
    kept = compile_library(tmp_path / "torch/lib", "frontend")
    (tmp_path / "cuda/bindings").mkdir(parents=True)
    (tmp_path / "cuda/bindings/driver.cpp").write_text("// generated\n")
    (tmp_path / "cuda/bindings/driver.pyx").write_text("# source\n")
    globs = ["nvidia/**/libsolver.so", "cuda/**/*.cpp"]
    assert slim.check(tmp_path, globs) == 1
    assert slim.slim(tmp_path, globs, workers=2) == 0
    assert "pruned 2 files" in capsys.readouterr().out
    assert not (tmp_path / "nvidia/solver/lib/libsolver.so").exists()
    assert (tmp_path / "cuda/bindings/driver.pyx").exists()
    assert slim.loads(kept)
    assert slim.check(tmp_path, globs) == 0


def test_needed_lists_dt_needed_names(slim, tmp_path):
    needed = compile_library(tmp_path / "a", "solver")
    library = compile_library(tmp_path / "b", "frontend", needs=needed)
    assert "libsolver.so" in slim.ElfFile.read(library).needed()
    assert "libc.so.6" in slim.ElfFile.read(library).needed()
