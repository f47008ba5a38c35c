"""A GPU image's CUDA stack, checked without a GPU: CUDA builds, one NCCL, Horovod on it, MPI still working.

Runs when TRAINSTACK_TEST_GPU_IMAGE names a built GPU image (`invoke test --gpu-build` builds
trainstack:gpu-cu13 and sets it).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import docker
import pytest

from trainstack.build import verify_image
from trainstack.docker_client import run_in_image
from trainstack.manifest import nccl_version_code, pip_check_problems
from trainstack.matrix import Flavor, load_matrix

GPU_IMAGE = os.environ.get("TRAINSTACK_TEST_GPU_IMAGE")
ALLREDUCE_UNIT = Path(__file__).parent / "units" / "hvd_allreduce_torch.py"
# Loads torch's and Horovod's CUDA libraries, then names the libnccl files the process maps and
# the one the loader resolves for Horovod's extension.
LOADED_NCCL = """
import glob, json, os, subprocess, sysconfig
import torch
torch.cuda.nccl.version()
import horovod.torch
maps = {line.split()[-1] for line in open("/proc/self/maps") if "/libnccl" in line}
extension = glob.glob(sysconfig.get_paths()["platlib"] + "/horovod/torch/mpi_lib_v2*.so")[0]
ldd = subprocess.run(["ldd", extension], capture_output=True, text=True).stdout
resolved = [line.split()[2] for line in ldd.splitlines() if "libnccl" in line]
print(json.dumps({"loaded": sorted(map(os.path.realpath, maps)), "horovod": [os.path.realpath(p) for p in resolved]}))
"""

pytestmark = pytest.mark.skipif(
    not GPU_IMAGE,
    reason="TRAINSTACK_TEST_GPU_IMAGE names no built GPU image (e.g. trainstack:gpu-cu13); `invoke test --gpu-build` builds one",
)


@pytest.fixture(scope="module")
def gpu_image(built_image) -> docker.models.images.Image:
    return built_image(GPU_IMAGE, "invoke build --flavor gpu-cu13")


@pytest.fixture(scope="module")
def flavor(gpu_image) -> Flavor:
    return load_matrix().flavor(gpu_image.labels["io.trainstack.flavor"])


def run(docker_client, gpu_image, command: list[str], expect: int = 0) -> str:
    status, output = run_in_image(docker_client, gpu_image.id, command)
    assert status == expect, f"exit {status}, expected {expect}; output:\n{output[-4000:]}"
    return output


def test_manifest_and_cuda_stack_match_the_matrix(docker_client, gpu_image, flavor):
    manifest = verify_image(docker_client, gpu_image.id, flavor)
    assert manifest["cuda_stack"]["nccl_files"] == manifest["cuda_stack"]["loaded"]["libnccl"]


def test_torch_is_built_for_the_flavors_cuda_and_nccl(docker_client, gpu_image, flavor):
    output = run(docker_client, gpu_image, ["python", "-c",
        "import json, torch; print(json.dumps([torch.version.cuda, torch.cuda.nccl.version()]))"])
    cuda, nccl = json.loads(output.strip().splitlines()[-1])
    assert cuda == flavor.version("cuda")
    assert ".".join(map(str, nccl)) == flavor.version("nccl")


def test_horovod_is_built_with_the_flavors_nccl(docker_client, gpu_image, flavor):
    output = run(docker_client, gpu_image, ["python", "-c", "import horovod.torch as hvd; print(hvd.nccl_built())"])
    assert int(output.strip().splitlines()[-1]) == nccl_version_code(flavor.version("nccl"))


def test_horovodrun_check_build_shows_nccl(docker_client, gpu_image):
    output = run(docker_client, gpu_image, ["horovodrun", "--check-build"])
    operations = output.split("Available Tensor Operations:")[1]
    assert "[X] NCCL" in operations, output


def test_one_libnccl_file_which_torch_and_horovod_both_load(docker_client, gpu_image):
    files = run(docker_client, gpu_image, ["bash", "-c", "find / -xdev -name 'libnccl*' 2>/dev/null; true"]).split()
    assert len(files) == 1, files
    libraries = json.loads(run(docker_client, gpu_image, ["python", "-c", LOADED_NCCL]).strip().splitlines()[-1])
    assert libraries == {"loaded": files, "horovod": files}


def test_no_cuda_compiler_or_build_prefix_in_the_image(docker_client, gpu_image):
    output = run(docker_client, gpu_image, ["bash", "-c", "ls -d /opt/cuda-build /usr/local/cuda* 2>/dev/null; command -v nvcc g++ cc; true"])
    assert output.strip() == "", output


def test_pip_check_is_clean(docker_client, gpu_image, flavor):
    _, output = run_in_image(docker_client, gpu_image.id, ["pip", "check"])
    assert pip_check_problems(flavor, output) == []


def test_horovod_cpu_allreduce_under_mpirun(docker_client, gpu_image):
    output = run(docker_client, gpu_image, ["mpirun", "-np", "2", "python", "-c", ALLREDUCE_UNIT.read_text()])
    assert "torch rank 0/2 allreduce=3.0" in output
    assert "torch rank 1/2 allreduce=3.0" in output
