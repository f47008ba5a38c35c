"""A GPU image's CUDA stack, checked without a GPU: CUDA builds, one copy of each CUDA library loaded by
every framework and Horovod extension, Horovod on NCCL, no build toolkit left, MPI and Gloo still working.

Runs when TRAINSTACK_TEST_GPU_IMAGE names a built GPU image (`invoke test --gpu-build` builds
trainstack:gpu and sets it; `--gpu-flavor gpu-cu13` does the same for that flavor).
"""
from __future__ import annotations

import json
import os

import docker
import pytest

from trainstack.image.build import CUDA_STACK_CHECK, verify_image
from trainstack.image.manifest import (
    HOROVOD_MODULES,
    HOROVOD_NAMES,
    LOADED_ONCE_LIBRARIES,
    library_copy_problems,
    nccl_version_code,
    pip_check_problems,
)
from trainstack.image.matrix import Flavor, load_matrix

GPU_IMAGE = os.environ.get("TRAINSTACK_TEST_GPU_IMAGE")
ALLREDUCE_UNITS = {"pytorch": ("hvd_allreduce_torch.py", "torch"), "tensorflow": ("hvd_allreduce_tf.py", "tf")}

pytestmark = pytest.mark.skipif(
    not GPU_IMAGE,
    reason="TRAINSTACK_TEST_GPU_IMAGE names no built GPU image (e.g. trainstack:gpu); `invoke test --gpu-build` builds one",
)


@pytest.fixture(scope="module")
def gpu_image(built_image) -> docker.models.images.Image:
    return built_image(GPU_IMAGE, "invoke build --gpu")


@pytest.fixture(scope="module")
def flavor(gpu_image) -> Flavor:
    return load_matrix().flavor(gpu_image.labels["io.trainstack.flavor"])


@pytest.fixture(scope="module")
def in_gpu_image(runner_for, gpu_image):
    return runner_for(gpu_image.id)


@pytest.fixture(scope="module")
def cuda_stack(in_gpu_image) -> dict:
    """images/scripts/check_cuda_stack.py: torch, TensorFlow and every Horovod extension imported in one process."""
    output = in_gpu_image.run(CUDA_STACK_CHECK)
    return json.loads(next(line for line in reversed(output.splitlines()) if line.startswith("{")))


def frameworks(flavor: Flavor) -> list[str]:
    return flavor.field("horovod", "frameworks") or []


def test_manifest_and_cuda_stack_match_the_matrix(docker_client, gpu_image, flavor):
    manifest = verify_image(docker_client, gpu_image.id, flavor)
    assert manifest["cuda_stack"]["nccl_files"] == manifest["cuda_stack"]["loaded"]["libnccl"]


def test_frameworks_and_horovod_import_in_one_process(in_gpu_image, flavor):
    modules = ["torch", *(["tensorflow"] if "tensorflow" in flavor.components else []),
               *(HOROVOD_MODULES[name] for name in frameworks(flavor))]
    output = in_gpu_image.run(["python", "-c", f"import {', '.join(modules)}; print('imported', {len(modules)})"])
    assert f"imported {len(modules)}" in output


def test_torch_is_built_for_the_flavors_cuda_and_nccl(cuda_stack, flavor):
    assert cuda_stack["torch"]["cuda"] == flavor.version("cuda")
    assert cuda_stack["torch"]["nccl"] == flavor.version("nccl")


def test_tensorflow_is_built_for_cuda_12_and_cudnn_9(cuda_stack, flavor):
    if "tensorflow" not in flavor.components:
        pytest.skip(f"{flavor.name} has no TensorFlow")
    assert cuda_stack["tensorflow"]["cuda"].split(".")[0] == "12"
    assert cuda_stack["tensorflow"]["cudnn"].split(".")[0] == "9"


def test_every_horovod_extension_is_built_with_the_flavors_nccl(cuda_stack, flavor):
    expected = {HOROVOD_MODULES[name]: nccl_version_code(flavor.version("nccl")) for name in frameworks(flavor)}
    assert cuda_stack["horovod"]["nccl_built"] == expected


def test_one_process_maps_one_file_of_each_cuda_library(cuda_stack):
    counts = {prefix: len(cuda_stack["loaded"][prefix]) for prefix in LOADED_ONCE_LIBRARIES}
    assert counts == {prefix: 1 for prefix in LOADED_ONCE_LIBRARIES}, cuda_stack["loaded"]
    assert cuda_stack["duplicate_libraries"] == {}


def test_horovod_resolves_the_libnccl_and_libcudart_the_frameworks_load(cuda_stack, in_gpu_image, flavor):
    # Shared libraries only: NCCL 2.30's wheel also carries libnccl_device.bc, bitcode for its device API.
    files = in_gpu_image.run(["bash", "-c", "find / -xdev -name 'libnccl*.so*' 2>/dev/null; true"]).split()
    assert files == cuda_stack["loaded"]["libnccl"]
    assert len(cuda_stack["horovod_links"]) == len(frameworks(flavor)), cuda_stack["horovod_links"]
    assert library_copy_problems(cuda_stack) == []


def test_horovodrun_check_build_shows_frameworks_controllers_and_nccl(in_gpu_image, flavor):
    output = in_gpu_image.run(["horovodrun", "--check-build"])
    wanted = [*frameworks(flavor), *(flavor.field("horovod", "controllers") or []), "nccl"]
    assert [name for name in wanted if f"[X] {HOROVOD_NAMES[name]}" not in output] == [], output
    assert "[X] NCCL" in output.split("Available Tensor Operations:")[1]


def test_no_nvcc_cuda_headers_or_build_prefix_in_the_image(in_gpu_image):
    # Triton's own runtime files (the headers and ptxas its JIT uses) are part of the package, not a toolkit; gcc and
    # g++ are torch.compile's toolchain (tests/image/test_compile.py).
    output = in_gpu_image.run(["bash", "-c",
        "ls -d /opt/cuda-build /usr/local/cuda* 2>/dev/null; command -v nvcc;"
        " find / -xdev -not -path '*/triton/backends/*'"
        " \\( -name nvcc -o -name cuda_runtime.h -o -name cuda_runtime_api.h \\) 2>/dev/null; true"])
    assert output.strip() == "", output


def test_pip_check_is_clean(in_gpu_image, flavor):
    output = in_gpu_image.run(["bash", "-c", "pip check; true"])
    assert pip_check_problems(flavor, output) == []


@pytest.mark.parametrize("launcher", [["mpirun", "-np", "2"], ["horovodrun", "-np", "2", "--gloo"]], ids=["mpi", "gloo"])
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_horovod_two_rank_cpu_allreduce(in_gpu_image, flavor, launcher, framework):
    if framework not in frameworks(flavor):
        pytest.skip(f"{flavor.name} builds Horovod without {framework}")
    unit, name = ALLREDUCE_UNITS[framework]
    output = in_gpu_image.run([*launcher, "python", f"/units/{unit}"])
    assert f"{name} rank 0/2 allreduce=3.0" in output
    assert f"{name} rank 1/2 allreduce=3.0" in output


def test_doctor_names_the_driver_minimum_and_the_missing_nvidia_runtime(in_gpu_image, flavor):
    output = in_gpu_image.run(["trainrun", "doctor"])
    minimum = {"12": "525.60.13", "13": "580"}[flavor.version("cuda").split(".")[0]]
    assert f"needs an NVIDIA driver >= {minimum}" in output, output
    assert "--gpus all" in output


def test_ray_trains_beside_the_cuda_stack_on_cpus(in_gpu_image, flavor):
    """Ray from the matrix in a GPU image: `ray` on PATH for Spark's executors, and Ray Train's TorchTrainer with 2
    workers under `trainrun ray`, on CPUs (gloo), with the flavor's CUDA build of torch imported beside it."""
    version = in_gpu_image.run(["ray", "--version"])
    assert str(flavor.version("ray")) in version, version
    output = in_gpu_image.run(["trainrun", "ray", "python", "/opt/trainstack/examples/ray_train_mnist.py"])
    result = json.loads(next(line[line.index("{"):] for line in reversed(output.splitlines()) if '{"workflow"' in line))
    assert result["ranks"] == 2 and result["accuracy"] >= 0.9, output[-3000:]
