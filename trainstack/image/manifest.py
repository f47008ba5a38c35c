"""Checks an image's manifest (what is installed) against its flavor, and names the image by its contents."""
from __future__ import annotations

import re
from typing import Any

from packaging.version import Version

from trainstack.image.matrix import Flavor

# Libraries Horovod's extensions must link shared, resolving to the very files torch loads.
SHARED_CUDA_LIBRARIES = ("libnccl", "libcudart")
# Libraries of which a process importing torch, TensorFlow and Horovod together must map exactly one file.
LOADED_ONCE_LIBRARIES = (*SHARED_CUDA_LIBRARIES, "libcudnn", "libcublas")
HOROVOD_MODULES = {"pytorch": "horovod.torch", "tensorflow": "horovod.tensorflow"}
# TensorFlow's libtensorflow_framework exports the CUDA runtime API as stubs that dlopen libcudart.so.N
# (the wheel's, as torch's); Horovod's TensorFlow extension calls those and links no libcudart itself.
CUDART_THROUGH_FRAMEWORK = ("horovod/tensorflow/",)
HOROVOD_NAMES = {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "mpi": "MPI", "gloo": "Gloo", "nccl": "NCCL"}


def expected_packages(flavor: Flavor) -> dict[str, str]:
    """pip distribution name -> version the image must hold."""
    packages = {"torch": flavor.version("torch"), "horovod": flavor.version("horovod"), "pyspark": flavor.version("pyspark")}
    if "torchvision" in flavor.components:
        packages["torchvision"] = flavor.version("torchvision")
    if "tensorflow" in flavor.components:
        packages[flavor.field("tensorflow", "pip_package") or "tensorflow"] = flavor.version("tensorflow")
    if "deepspeed" in flavor.components:
        packages["deepspeed"] = flavor.version("deepspeed")
    packages.update(flavor.python_packages)
    return packages


def manifest_mismatches(flavor: Flavor, manifest: dict[str, Any], installed: dict[str, str]) -> list[str]:
    """Every way the built image differs from the flavor; empty when it matches.

    `installed` maps every installed distribution to its version (the image's constraints file).
    """
    problems = []
    if manifest.get("flavor") != flavor.name:
        problems.append(f"manifest flavor is {manifest.get('flavor')!r}, expected {flavor.name!r}")
    if not _same_release(manifest.get("python"), flavor.version("python")):
        problems.append(f"python is {manifest.get('python')}, matrix says {flavor.version('python')}")
    for name, version in expected_packages(flavor).items():
        if installed.get(_normalize(name)) != version:
            problems.append(f"{name} is {installed.get(_normalize(name), 'not installed')}, matrix says {version}")
    for entry in flavor.absent:
        if _normalize(entry["package"]) in installed:
            problems.append(f"{entry['package']} {installed[_normalize(entry['package'])]} is installed, "
                            f"but the matrix lists it as absent from {flavor.name}")
    libraries = manifest.get("libraries", {})
    for name in ("openmpi", "java", "cuda", "cudnn", "nccl"):
        expected = flavor.version(name)
        if expected is None:
            if name in ("cuda", "cudnn", "nccl") and libraries.get(name):
                problems.append(f"{name} {libraries[name]} is installed in a flavor without {name}")
        elif not _same_release(libraries.get(name), expected):
            problems.append(f"{name} is {libraries.get(name) or 'not found'}, matrix says {expected}")
    problems += horovod_mismatches(flavor, manifest.get("horovod", {}))
    if flavor.gpu:
        problems += cuda_stack_mismatches(flavor, manifest.get("cuda_stack"))
    return problems


def cuda_stack_mismatches(flavor: Flavor, stack: dict[str, Any] | None) -> list[str]:
    """The frameworks' CUDA builds against the flavor, and one copy of each CUDA library, loaded by all."""
    if stack is None:
        return ["the manifest has no cuda_stack: write_manifest.py found no NCCL wheel"]
    cuda, cudnn, nccl = (str(flavor.version(name)) for name in ("cuda", "cudnn", "nccl"))
    torch = stack.get("torch", {})
    problems = []
    if not _same_release(torch.get("cuda"), cuda):
        problems.append(f"torch.version.cuda is {torch.get('cuda')}, matrix says cuda {cuda}")
    if not _same_release(torch.get("nccl"), nccl):
        problems.append(f"torch.cuda.nccl.version() is {torch.get('nccl')}, matrix says nccl {nccl}")
    if not _same_release(torch.get("cudnn"), _release(cudnn, 3)):
        problems.append(f"torch.backends.cudnn.version() is {torch.get('cudnn')}, matrix says cudnn {cudnn}")
    if "tensorflow" in flavor.components:
        problems += _tensorflow_build_mismatches(stack.get("tensorflow") or {}, cuda, cudnn)
    nccl_built = stack.get("horovod", {}).get("nccl_built", {})
    for framework in flavor.field("horovod", "frameworks") or []:
        module = HOROVOD_MODULES[framework]
        if nccl_built.get(module) != nccl_version_code(nccl):
            problems.append(f"{module}.nccl_built() is {nccl_built.get(module)}, "
                            f"expected {nccl_version_code(nccl)} (NCCL {nccl})")
    return problems + library_copy_problems(stack)


def _tensorflow_build_mismatches(build_info: dict[str, Any], cuda: str, cudnn: str) -> list[str]:
    # TensorFlow is built on an older CUDA 12 than it runs on; only the major versions must agree.
    problems = []
    if not _same_release(build_info.get("cuda"), _release(cuda, 1)):
        problems.append(f"TensorFlow is built for CUDA {build_info.get('cuda')}, matrix says cuda {cuda}")
    if not _same_release(build_info.get("cudnn"), _release(cudnn, 1)):
        problems.append(f"TensorFlow is built for cuDNN {build_info.get('cudnn')}, matrix says cudnn {cudnn}")
    return problems


def library_copy_problems(stack: dict[str, Any]) -> list[str]:
    """One libnccl file in the image, no CUDA library twice, and Horovod resolving the files torch loads."""
    nccl_files = stack.get("nccl_files", [])
    problems = [] if len(nccl_files) == 1 else [f"the image holds {len(nccl_files)} libnccl files, expected 1: {nccl_files}"]
    problems += [f"{name} is in the image {len(paths)} times: {', '.join(paths)}"
                 for name, paths in stack.get("duplicate_libraries", {}).items()]
    loaded = stack.get("loaded", {})
    for prefix in LOADED_ONCE_LIBRARIES:
        if len(loaded.get(prefix, [])) != 1:
            problems.append(f"the frameworks and Horovod load {len(loaded.get(prefix, []))} {prefix} files, "
                            f"expected 1: {loaded.get(prefix)}")
    for extension, resolved in stack.get("horovod_links", {}).items():
        for prefix in SHARED_CUDA_LIBRARIES:
            paths = [path for name, path in resolved.items() if name.startswith(prefix)]
            if not paths and prefix == "libcudart" and extension.startswith(CUDART_THROUGH_FRAMEWORK):
                continue
            if paths != loaded.get(prefix):
                problems.append(f"{extension} resolves {prefix} to {paths or 'nothing (linked statically?)'}, "
                                f"torch loads {loaded.get(prefix)}")
    return problems


def nccl_version_code(version: str) -> int:
    """NCCL_VERSION_CODE, which hvd.nccl_built() returns: 2.29.7 -> 22907."""
    major, minor, patch = Version(version).release[:3]
    return major * 10000 + minor * 100 + patch


def horovod_mismatches(flavor: Flavor, build: dict[str, list[str]]) -> list[str]:
    """Compares `horovodrun --check-build` sections with what the flavor builds Horovod with."""
    wanted = {
        "frameworks": flavor.field("horovod", "frameworks") or [],
        "controllers": flavor.field("horovod", "controllers") or [],
        "tensor_operations": [op for op in [flavor.field("horovod", "gpu_operations")] if op],
    }
    problems = []
    for section, names in wanted.items():
        for name in names:
            if HOROVOD_NAMES[name] not in build.get(section, []):
                problems.append(f"horovodrun --check-build does not show {HOROVOD_NAMES[name]} under {section}")
    return problems


def pip_check_problems(flavor: Flavor, pip_check_output: str) -> list[str]:
    """`pip check` lines, less the unmet dependencies of packages the matrix installs with no_deps."""
    tolerated = tuple(f"{_normalize(name)} {flavor.python_packages[name]} requires " for name in flavor.no_deps_packages)
    return [
        f"pip check: {line.strip()}"
        for line in pip_check_output.splitlines()
        if line.strip() and not line.strip().startswith("No broken requirements")
        and not _normalize_line(line).startswith(tolerated)
    ]


def _normalize_line(line: str) -> str:
    name, _, rest = line.strip().partition(" ")
    return f"{_normalize(name)} {rest}"


def parse_constraints(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        name, sep, version = line.partition("==")
        if sep:
            pins[_normalize(name)] = version.strip()
    return pins


def _release(version: str, parts: int) -> str:
    return ".".join(str(number) for number in Version(version).release[:parts])


def _same_release(actual: str | None, expected: str) -> bool:
    """True when `actual` starts with every release number `expected` gives (3.11 matches 3.11.2)."""
    if not actual:
        return False
    expected_parts = Version(expected).release
    try:
        actual_parts = Version(actual.split("+")[0].replace("_", ".")).release
    except ValueError:
        return False
    return actual_parts[: len(expected_parts)] == expected_parts


def _normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


# Setuid/setgid files on the image's root filesystem, listed as root (the training user cannot read every folder).
SETID_FIND = ["find", "/", "-xdev", "-type", "f", "-perm", "/6000", "-printf", "%m %u:%g %p\\n"]
# The setuid/setgid files that may stay, each with the reason the training user needs it. None does: the
# Dockerfile's last RUN removes every such bit.
ALLOWED_SETID_FILES: dict[str, str] = {}


def setid_problems(status: int, find_output: str, allowed: dict[str, str] = ALLOWED_SETID_FILES) -> list[str]:
    """Each setuid/setgid file SETID_FIND listed (lines `MODE USER:GROUP PATH`) that `allowed` gives no reason for."""
    if status != 0:
        return [f"listing setuid/setgid files failed (find exit {status}): {find_output.strip().splitlines()[-1:]}"]
    problems = []
    for line in find_output.splitlines():
        mode, _, rest = line.strip().partition(" ")
        owner, _, path = rest.partition(" ")
        if not path or path in allowed:
            continue
        bits = int(mode, 8) if re.fullmatch(r"[0-7]+", mode) else 0
        kinds = [kind for bit, kind in ((0o4000, "setuid"), (0o2000, "setgid")) if bits & bit] or ["setuid/setgid"]
        problems.append(f"{path} is {' and '.join(kinds)} (mode {mode}, {owner}): the training user needs no such "
                        "file; the Dockerfile's `find ... -exec chmod a-s` step should have removed the bit")
    return problems
