"""Horovod's sdist takes every flavor's patches in order, as the Dockerfile applies them, and the patched sources build
with current toolchains: GCC 13 and later, CMake 4, and no index at build time.

GCC 13's libstdc++ stopped including <string>, <stdexcept> and <cstdint> through other standard headers, and Horovod
0.28.1 relied on that: under GCC 14 (Debian 13) `horovod/common/group_table.h` fails with "'string' in namespace 'std'
does not name a type" and `common.h` with "'logic_error' is not a member of 'std'" (measured 2026-11-27, on a GPU
host and in a trixie root with GCC 14.2); GCC 14 also rejects the bundled flatbuffers' span::operator=, which assigns
const members. horovod-0.28.1-current-toolchains.patch fixes both. Where the newest g++ here is bookworm's GCC 12,
compiling the headers alone passes with or without the patch, so the include check below is what holds the include
fix on every compiler: each Horovod source that uses one of those names includes its header, itself or through a
Horovod header it includes. Its test on the unpatched sdist shows it names the very headers GCC 14 rejects.

The sdist is fetched once with the Dockerfile's `pip download` into the cache (horovod_source.sdist_cache); without
it and without an index the tests are skipped, saying so."""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from trainstack.errors import TrainstackError
from trainstack.image.components import horovod_build_env
from trainstack.image.horovod_source import cached_sdist, horovod_source, unpack_and_patch
from trainstack.image.matrix import PATCHES_DIR, load_matrix

CURRENT_TOOLCHAINS = "horovod-0.28.1-current-toolchains.patch"
# The names GCC 13+ no longer declares through other standard headers, and the headers that declare them.
STANDARD_NAMES = {
    "<string>": (re.compile(r"\bstd::(string|to_string|sto(i|l|ll|ul|ull|f|d))\b"), {"<string>"}),
    "<stdexcept>": (re.compile(r"\bstd::(logic_error|runtime_error|invalid_argument|out_of_range|domain_error|"
                               r"length_error|range_error|overflow_error|underflow_error)\b"), {"<stdexcept>"}),
    "<cstdint>": (re.compile(r"(?<![\w:])(std::)?u?int(8|16|32|64)_t\b"), {"<cstdint>", "<stdint.h>"}),
}
# Horovod's C++ that the images compile (MXNet's is not), and the bundled libraries' include folders (CMakeLists.txt).
SOURCES = ("horovod/common/**/*.h", "horovod/common/**/*.cc", "horovod/torch/*.h", "horovod/torch/*.cc",
           "horovod/tensorflow/*.h", "horovod/tensorflow/*.cc")
INCLUDE_DIRS = ("third_party/HTTPRequest/include", "third_party/flatbuffers/include", "third_party/gloo",
                "third_party/eigen", "third_party/lbfgs/include")
_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


@pytest.fixture(scope="module")
def sdist(matrix) -> Path:
    try:
        return cached_sdist(horovod_source(matrix.flavor("cpu")).version)
    except TrainstackError as exc:
        pytest.skip(f"no Horovod sdist in the cache and none fetched: {exc}")


@pytest.fixture(scope="module")
def patched(matrix, sdist, tmp_path_factory) -> Path:
    """The gpu flavor's tree: every Horovod patch but keras-sparse-labels, applied as its Dockerfile does."""
    return unpack_and_patch(sdist, horovod_source(matrix.flavor("gpu")).patch_paths, tmp_path_factory.mktemp("gpu"))


@pytest.fixture(scope="module")
def unpatched(sdist, tmp_path_factory) -> Path:
    return unpack_and_patch(sdist, [], tmp_path_factory.mktemp("unpatched"))


def touched_files(patch: str) -> list[str]:
    return re.findall(r"^\+\+\+ b/(\S+)", (PATCHES_DIR / patch).read_text(encoding="utf-8"), re.M)


def missing_includes(root: Path) -> dict[str, list[str]]:
    """{source: [standard headers it uses names of without including them]} over SOURCES, where a source includes
    what it includes itself and what the Horovod and bundled headers it includes include (GCC 13+ adds nothing)."""
    include_dirs = [root / folder for folder in INCLUDE_DIRS] + sorted(root.glob("third_party/boost/*/include"))
    memo: dict[Path, set[str]] = {}

    def resolve(source: Path, name: str, quoted: bool) -> Path | None:
        candidates = [source.parent / name] if quoted else []
        candidates += [folder / name for folder in include_dirs] + [root / name, root / "horovod" / name]
        return next((candidate.resolve() for candidate in candidates if candidate.is_file()), None)

    def standard_includes(source: Path, seen: set[Path]) -> set[str]:
        if source in memo:
            return memo[source]
        if source in seen:
            return set()
        seen.add(source)
        found: set[str] = set()
        for kind, name in _INCLUDE.findall(source.read_text(encoding="utf-8", errors="replace")):
            header = resolve(source, name, kind == '"')
            found |= standard_includes(header, seen) if header else {f"<{name}>"}
        memo[source] = found
        return found

    missing = {}
    for pattern in SOURCES:
        for source in sorted(root.glob(pattern)):
            if source.name.endswith("_impl.cc"):  # included into another .cc, never compiled alone
                continue
            code = _COMMENT.sub("", source.read_text(encoding="utf-8", errors="replace"))
            included = standard_includes(source.resolve(), set())
            names = [header for header, (uses, declaring) in STANDARD_NAMES.items()
                     if uses.search(code) and not included & declaring]
            if names:
                missing[str(source.relative_to(root))] = names
    return missing


@pytest.mark.parametrize("flavor", ["cpu", "gpu", "gpu-cu13"])
def test_every_flavors_patches_apply_in_order_to_the_sdist(matrix, sdist, tmp_path, flavor):
    source = horovod_source(matrix.flavor(flavor))
    assert CURRENT_TOOLCHAINS in source.patches
    tree = unpack_and_patch(sdist, source.patch_paths, tmp_path)
    assert (tree / "setup.py").is_file()


def test_the_patch_adds_the_includes_gcc_13_needs(patched):
    assert missing_includes(patched) == {}


def test_the_include_check_names_what_gcc_14_rejects_in_the_unpatched_sdist(unpatched):
    missing = missing_includes(unpatched)
    # GCC 14.2: group_table.h:35 'string' in namespace 'std' does not name a type; common.h:343 'logic_error' is
    # not a member of 'std'; nvtx_op_range.h:96 'int64_t' has not been declared (that one already on GCC 12).
    assert "<string>" in missing["horovod/common/group_table.h"]
    assert "<stdexcept>" in missing["horovod/common/common.h"]
    assert "<cstdint>" in missing["horovod/common/nvtx_op_range.h"]


def test_the_bundled_flatbuffers_span_assigns_no_const_member(patched, unpatched):
    """GCC 14: "assignment of read-only member 'flatbuffers::span<T, Extent>::count_'" in span::operator=, which
    nothing instantiates; GCC 12 and 13 accept it."""
    header = Path("third_party/flatbuffers/include/flatbuffers/stl_emulation.h")
    members = re.compile(r"^\s*(pointer const data_|const size_type count_);", re.M)
    assert len(members.findall((unpatched / header).read_text(encoding="utf-8"))) == 2
    assert members.findall((patched / header).read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("header", [path for path in touched_files(CURRENT_TOOLCHAINS) if path.endswith(".h")])
def test_each_patched_header_compiles_on_its_own(patched, header):
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no g++ on this machine")
    # With the bundled libraries' include folders, as Horovod's CMakeLists.txt gives them.
    includes = [f"-I{folder}" for folder in INCLUDE_DIRS]
    result = subprocess.run([compiler, "-std=c++17", "-fsyntax-only", *includes, "-x", "c++", header], cwd=patched,
                            capture_output=True, text=True)
    version = subprocess.run([compiler, "-dumpfullversion"], capture_output=True, text=True).stdout.strip()
    assert result.returncode == 0, f"g++ {version}:\n{result.stderr}"


def test_setup_py_fetches_nothing_at_build_time(patched, unpatched):
    """setuptools fetched setup_requires (cffi, ...) with a pip of its own, past an offline pip's --no-index."""
    def setup_requires(tree: Path) -> ast.expr:
        call = next(node for node in ast.walk(ast.parse((tree / "setup.py").read_text(encoding="utf-8")))
                    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup")
        return next(keyword.value for keyword in call.keywords if keyword.arg == "setup_requires")

    assert not isinstance(setup_requires(unpatched), ast.List)
    patched_value = setup_requires(patched)
    assert isinstance(patched_value, ast.List) and patched_value.elts == []


@pytest.mark.parametrize("flavor", ["cpu", "gpu", "gpu-cu13"])
def test_cmake_4_configures_the_bundled_gloo(matrix, patched, flavor):
    """CMake 4 refuses Gloo's cmake_minimum_required(2.8.12) unless CMAKE_POLICY_VERSION_MINIMUM raises it; CMake
    3.x ignores the variable, so bookworm's CMake 3.25 in the builder builds as before."""
    assert horovod_build_env(matrix.flavor(flavor))["CMAKE_POLICY_VERSION_MINIMUM"] == "3.5"
    gloo = (patched / "third_party" / "gloo" / "CMakeLists.txt").read_text(encoding="utf-8")
    assert "cmake_minimum_required(VERSION 2.8.12" in gloo
