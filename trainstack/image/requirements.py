"""A flavor's pip requirements, in the order the builder installs them: what Horovod compiles against (the
frameworks and the CUDA wheel pins), then the libraries, then the pins installed without dependencies.
The resolver checks the first list against pip's own resolver."""
from __future__ import annotations

from trainrun.image_contract import LOCAL_PACKAGE_DIRS
from trainstack.image.matrix import REPO_ROOT, Flavor

# Build tooling inside the image's venv: Horovod builds with --no-build-isolation.
BUILD_TOOL_PACKAGES = {"setuptools": "80.9.0", "wheel": "0.45.1"}
# Pins of NVIDIA's CUDA wheels (python_packages named so) choose the CUDA stack Horovod compiles
# against, so they are installed with the frameworks.
CUDA_WHEEL_PREFIX = "nvidia-"


def framework_requirements(flavor: Flavor) -> list[str]:
    """What Horovod compiles against, installed before it: build tools, torch (with torchvision), TensorFlow, CUDA
    wheel pins."""
    lines = [f"{name}=={version}" for name, version in BUILD_TOOL_PACKAGES.items()]
    lines.append(f"torch=={flavor.version('torch')}")
    # In the same install as torch: each torchvision requires one exact torch, so pip never replaces the matrix's.
    if "torchvision" in flavor.components:
        lines.append(f"torchvision=={flavor.version('torchvision')}")
    if "tensorflow" in flavor.components:
        package = flavor.field("tensorflow", "pip_package") or "tensorflow"
        extras = "[and-cuda]" if flavor.gpu else ""
        lines.append(f"{package}{extras}=={flavor.version('tensorflow')}")
    lines += [f"{name}=={version}" for name, version in sorted(flavor.python_packages.items())
              if name.startswith(CUDA_WHEEL_PREFIX)]
    return lines


def library_requirements(flavor: Flavor) -> list[str]:
    """Everything else, installed after the Horovod build so a pin change here does not recompile it."""
    lines = [f"pyspark=={flavor.version('pyspark')}"]
    lines += [f"{name}=={version}" for name, version in sorted(flavor.python_packages.items())
              if name not in flavor.no_deps_packages and not name.startswith(CUDA_WHEEL_PREFIX)]
    lines += [f"{name}" for name in _local_package_dependencies()]
    return lines


def no_deps_requirements(flavor: Flavor) -> list[str]:
    """Packages installed after the others without their dependencies (see matrix `no_deps`)."""
    return [f"{name}=={flavor.python_packages[name]}" for name in sorted(flavor.no_deps_packages)]


def _local_package_dependencies() -> list[str]:
    """Runtime dependencies declared by launcher/ and templates/, installed with the frameworks."""
    import tomllib

    names: list[str] = []
    for name in LOCAL_PACKAGE_DIRS:
        pyproject = REPO_ROOT / name / "pyproject.toml"
        names += tomllib.loads(pyproject.read_text())["project"].get("dependencies", [])
    return sorted(set(names))
