"""The cpu flavor's patched Horovod sdist builds with current toolchains and no index: Debian 13's GCC 14 with pip's
CMake 4, in a container of a trixie base image made as `invoke base` makes bookworm's (debootstrap + docker import,
tagged trainstack/debian-base:trixie, made once when it is not there). The image's own toolchain (bookworm's GCC 12
and CMake 3.25) builds the same patches in every `invoke build`.

The build is the Dockerfile's: the patches in the flavor's order, its horovod_build_env (CMAKE_POLICY_VERSION_MINIMUM
included) and `pip install --no-build-isolation`, here with --no-index so that a fetch at build time fails it, and
with PyTorch alone (TensorFlow's extension would triple the time and needs no other toolchain fix). Then two Gloo
ranks allreduce through the built extension. Minutes on 2 cores: `invoke test --long` runs it.

torch comes from the wheelhouse ($TRAINSTACK_WHEELHOUSE) when it holds the flavor's torch for the Python used, else
from the flavor's torch index. Debian 13's Python is 3.13; when the wheelhouse holds torch only for the Python running
the tests and that Python is not the system's (pyenv, uv: a prefix of its own), that prefix is mounted into the
container at its own path and used instead: the compilers and CMake are what is under test, not the interpreter."""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

from trainstack.docker_client import run_container
from trainstack.image.base_image import make_base_image
from trainstack.image.horovod_source import cached_sdist, horovod_source, unpack_and_patch
from trainstack.image.matrix import load_matrix
from trainstack.image.requirements import framework_requirements
from trainstack.image.sources import CA_BUNDLE_VARIABLE, WHEELHOUSE_VARIABLE

pytestmark = pytest.mark.long

TRIXIE_TAG = "trainstack/debian-base:trixie"
PACKAGES = "g++ make patch python3-dev python3-venv libopenmpi-dev openmpi-bin ca-certificates"
# What horovodrun imports, which --no-deps leaves out (Horovod's install_requires but cffi, which nothing imports).
RUNTIME_REQUIREMENTS = "cloudpickle psutil pyyaml packaging"
ALLREDUCE = ("import horovod.torch as hvd, torch; hvd.init(); "
             "s = hvd.allreduce(torch.arange(4.0) * (hvd.rank() + 1), op=hvd.Sum); "
             "assert s.tolist() == [0.0, 3.0, 6.0, 9.0], s; print('allreduce exact on rank', hvd.rank())")


def torch_wheel(wheelhouse: Path | None, torch_version: str, python_tag: str) -> Path | None:
    for wheel in sorted(wheelhouse.glob("torch-*.whl")) if wheelhouse else []:
        name, version, _, tags = parse_wheel_filename(wheel.name)
        if str(version) == torch_version and any(tag.interpreter == python_tag for tag in tags):
            return wheel
    return None


def test_the_patched_sdist_builds_under_gcc_14_and_cmake_4_without_an_index(docker_client, tmp_path):
    flavor = load_matrix().flavor("cpu")
    source = horovod_source(flavor)
    tree = unpack_and_patch(cached_sdist(source.version), source.patch_paths, tmp_path / "src")
    try:
        docker_client.images.get(TRIXIE_TAG)
    except Exception:
        make_base_image(TRIXIE_TAG, suite="trixie")

    env = dict(source.build_env)
    env.pop("HOROVOD_WITH_TENSORFLOW")
    env["HOROVOD_WITHOUT_TENSORFLOW"] = "1"
    torch_version = str(flavor.version("torch"))
    wheelhouse = Path(os.environ[WHEELHOUSE_VARIABLE]) if os.environ.get(WHEELHOUSE_VARIABLE) else None
    volumes = {str(tree): {"bind": "/src", "mode": "rw"}}
    python = "python3"
    host_python_tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheel = torch_wheel(wheelhouse, torch_version, "cp313")
    if wheel is None and sys.base_prefix != "/usr" and torch_wheel(wheelhouse, torch_version, host_python_tag):
        wheel = torch_wheel(wheelhouse, torch_version, host_python_tag)
        python = str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")
        volumes[sys.base_prefix] = {"bind": sys.base_prefix, "mode": "ro"}
    if wheel is not None:
        volumes[str(wheel.parent)] = {"bind": "/wheelhouse", "mode": "ro"}
        torch_install = f"/wheelhouse/{shlex.quote(wheel.name)}"
    else:
        torch_install = f"--index-url {shlex.quote(flavor.field('torch', 'index_url'))} torch=={torch_version}"
    ca = os.environ.get(CA_BUNDLE_VARIABLE)
    if ca:
        volumes[ca] = {"bind": "/etc/trainstack-ca.crt", "mode": "ro"}
    setuptools = next(line for line in framework_requirements(flavor) if line.startswith("setuptools=="))
    build_env = " ".join(f"{name}={shlex.quote(value)}" for name, value in env.items())
    script = f"""set -e
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends {PACKAGES} >/dev/null
{"cat /etc/trainstack-ca.crt >> /etc/ssl/certs/ca-certificates.crt; export PIP_CERT=/etc/ssl/certs/ca-certificates.crt"
   if ca else ""}
{python} -m venv /opt/venv && . /opt/venv/bin/activate
pip install -q {shlex.quote(setuptools)} cmake {RUNTIME_REQUIREMENTS} {torch_install}
echo "toolchain: $(g++ -dumpfullversion) / $(cmake --version | head -1) / $(python --version)"
cd /src && start=$(date +%s)
{build_env} MAKEFLAGS=-j$(nproc) PIP_NO_INDEX=1 \\
  pip install --no-index --no-deps --no-build-isolation . > /tmp/build.log 2>&1 \\
  || {{ tail -40 /tmp/build.log; exit 1; }}
echo "built in $(( $(date +%s) - start )) s"
cd / && horovodrun --check-build
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 horovodrun --gloo -np 2 python -c {shlex.quote(ALLREDUCE)}
"""
    code, output = run_container(docker_client, {"image": TRIXIE_TAG, "command": ["bash", "-c", script],
                                                 "volumes": volumes, "shm_size": "1g"}, timeout=3600)
    assert code == 0, output[-6000:]
    toolchain = next(line for line in output.splitlines() if line.startswith("toolchain: "))
    assert toolchain.startswith("toolchain: 14.") and "cmake version 4." in toolchain, toolchain
    assert "[X] PyTorch" in output and "[X] Gloo" in output and "[X] MPI" in output
    assert output.count("allreduce exact on rank") == 2
    print(toolchain, next(line for line in output.splitlines() if line.startswith("built in ")))
