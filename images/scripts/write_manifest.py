"""Runs inside the image at build time: records what is really installed.

Writes the manifest (versions read from installed packages and libraries, never copied from
the matrix) and a pip constraints file pinning every installed distribution, so a later
`pip install` in the image cannot silently replace part of the stack. The build context's record
(trainstack/image/build_context.py build_record: the patch files applied, with their sha256, and the
matrix rules that apply) is added as the manifest's `patches` and `rules`, which nothing installed shows.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sysconfig
from pathlib import Path

FRAMEWORK_PACKAGES = [
    "torch", "torchvision", "tensorflow", "tensorflow-cpu", "tf_keras", "keras", "horovod", "pyspark",
    "numpy", "mpi4py", "trainrun", "pooltemplates",
]
CUDA_LIBRARY_PACKAGES = {
    "cuda": ["nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13"],
    "cudnn": ["nvidia-cudnn-cu12", "nvidia-cudnn-cu13"],
    "nccl": ["nvidia-nccl-cu12", "nvidia-nccl-cu13"],
}
# CUDA and NCCL shared libraries, whose copies the manifest counts across the whole image.
CUDA_LIBRARY_NAME = re.compile(
    r"^lib(cudart|cublas|cudnn|cufft|cufile|curand|cusolver|cusparse|cupti|nvrtc|nvJitLink|nvshmem|nvToolsExt|nvvm|nccl)"
    r"[\w.-]*\.so(\.\d+)*$"
)
# Libraries one process must map exactly one file of, after importing the frameworks and Horovod.
LOADED_LIBRARIES = ("libnccl", "libcudart", "libcudnn", "libcublas")
SKIPPED_TREES = {"/proc", "/sys", "/dev"}


def installed_versions() -> dict[str, str]:
    versions = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            versions[name] = dist.version
    return versions


def package_version(versions: dict[str, str], name: str) -> str | None:
    wanted = _normalize(name)
    return next((v for n, v in versions.items() if _normalize(n) == wanted), None)


def openmpi_version() -> str | None:
    output = _command_output(["mpirun", "--version"])
    match = re.search(r"Open MPI\)?\s+(\d+\.\d+\.\d+)", output)
    return match.group(1) if match else None


def java_version() -> str | None:
    output = _command_output(["java", "-version"])
    match = re.search(r'version "([^"]+)"', output)
    return match.group(1) if match else None


def os_release() -> dict[str, str]:
    fields = {}
    for line in Path("/etc/os-release").read_text().splitlines():
        key, _, value = line.partition("=")
        fields[key] = value.strip('"')
    return {"id": fields.get("ID", ""), "version_id": fields.get("VERSION_ID", ""), "codename": fields.get("VERSION_CODENAME", "")}


def horovod_build() -> dict[str, list[str]]:
    """Parses `horovodrun --check-build`: the [X] lines under each heading."""
    output = _command_output(["horovodrun", "--check-build"])
    sections: dict[str, list[str]] = {}
    current = None
    for line in output.splitlines():
        heading = re.match(r"Available (\w[\w ]*):", line.strip())
        if heading:
            current = heading.group(1).strip().lower().replace(" ", "_")
            sections[current] = []
        elif current and line.strip().startswith("[X]"):
            sections[current].append(line.strip()[3:].strip())
    return sections


def cuda_stack(with_tensorflow: bool) -> dict:
    """What the frameworks and Horovod were built with and which CUDA files they load, all imported in
    this one process; needs no GPU."""
    import horovod.torch
    import torch

    stack = {
        "torch": {
            "cuda": torch.version.cuda,
            "nccl": ".".join(str(part) for part in torch.cuda.nccl.version()),
            "cudnn": _cudnn_release(torch.backends.cudnn.version()),
        },
        "horovod": {"nccl_built": {"horovod.torch": horovod.torch.nccl_built()}},
    }
    if with_tensorflow:
        import horovod.tensorflow
        import tensorflow as tf

        build_info = tf.sysconfig.get_build_info()
        stack["tensorflow"] = {"cuda": build_info.get("cuda_version"), "cudnn": build_info.get("cudnn_version")}
        stack["horovod"]["nccl_built"]["horovod.tensorflow"] = horovod.tensorflow.nccl_built()
    libraries = cuda_library_files(Path("/"))
    stack["nccl_files"] = sorted(path for name, paths in libraries.items() if name.startswith("libnccl") for path in paths)
    stack["duplicate_libraries"] = duplicate_libraries(libraries)
    stack["loaded"] = loaded_libraries(Path("/proc/self/maps").read_text())
    stack["horovod_links"] = horovod_links(Path(sysconfig.get_paths()["platlib"]))
    return stack


def _cudnn_release(version: int | None) -> str | None:
    """cuDNN 9's version number (major*10000 + minor*100 + patch) as 9.20.0."""
    return None if version is None else f"{version // 10000}.{version % 10000 // 100}.{version % 100}"


def cuda_library_files(root: Path) -> dict[str, list[str]]:
    """File name -> every path under root holding a CUDA or NCCL shared library (or a link named so)."""
    found: dict[str, list[str]] = {}
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [name for name in subdirectories if os.path.join(directory, name) not in SKIPPED_TREES]
        for name in files:
            if CUDA_LIBRARY_NAME.match(name):
                found.setdefault(name, []).append(os.path.join(directory, name))
    return {name: sorted(paths) for name, paths in sorted(found.items())}


def duplicate_libraries(libraries: dict[str, list[str]]) -> dict[str, list[str]]:
    """The names of cuda_library_files that are more than one file: links to one file are one copy."""
    return {name: paths for name, paths in libraries.items() if len({os.path.realpath(path) for path in paths}) > 1}


def loaded_libraries(proc_maps: str) -> dict[str, list[str]]:
    """The files of LOADED_LIBRARIES (libcudnn.so.9, not libcudnn_ops.so.9) mapped into this process."""
    paths = {line.split()[-1] for line in proc_maps.splitlines() if "/" in line}
    return {
        prefix: sorted({os.path.realpath(path) for path in paths if os.path.basename(path).startswith(f"{prefix}.so")})
        for prefix in LOADED_LIBRARIES
    }


def horovod_links(site_packages: Path) -> dict[str, dict[str, str]]:
    """For each Horovod extension, the file the loader resolves each of its LOADED_LIBRARIES to (ldd)."""
    links = {}
    for extension in sorted((site_packages / "horovod").glob("**/*.so")):
        resolved = re.findall(r"^\s*(\S+) => (\S+)", _command_output(["ldd", str(extension)]), re.MULTILINE)
        links[str(extension.relative_to(site_packages))] = {
            name: os.path.realpath(path) if path != "not" else "not found"
            for name, path in resolved if name.startswith(LOADED_LIBRARIES)
        }
    return links


def build_manifest(flavor: str, build_record: dict) -> dict:
    versions = installed_versions()
    cuda_libraries = {
        key: next((v for name in names if (v := package_version(versions, name))), None)
        for key, names in CUDA_LIBRARY_PACKAGES.items()
    }
    manifest = {
        "flavor": flavor,
        "python": platform.python_version(),
        "os": os_release(),
        "packages": {name: v for name in FRAMEWORK_PACKAGES if (v := package_version(versions, name))},
        "libraries": {"openmpi": openmpi_version(), "java": java_version(), **cuda_libraries},
        "horovod": horovod_build(),
        "patches": build_record["patches"],
        "rules": build_record["rules"],
    }
    if cuda_libraries["nccl"]:
        manifest["cuda_stack"] = cuda_stack(with_tensorflow=package_version(versions, "tensorflow") is not None)
    return manifest


def constraints(versions: dict[str, str]) -> str:
    skipped = {"pip", "setuptools", "wheel"}
    lines = [f"{name}=={version}" for name, version in sorted(versions.items(), key=lambda kv: kv[0].lower())
             if _normalize(name) not in skipped]
    return "\n".join(lines) + "\n"


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _command_output(argv: list[str]) -> str:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except FileNotFoundError:
        return ""
    return result.stdout + result.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--flavor", required=True)
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--constraints", type=Path, required=True)
    parser.add_argument("--build-record", type=Path, required=True)
    args = parser.parse_args()
    build_record = json.loads(args.build_record.read_text())
    args.manifest.parent.mkdir(parents=True, exist_ok=True)
    args.manifest.write_text(json.dumps(build_manifest(args.flavor, build_record), indent=2, sort_keys=True) + "\n")
    args.constraints.write_text(constraints(installed_versions()))


if __name__ == "__main__":
    main()
