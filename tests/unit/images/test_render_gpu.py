from pathlib import Path

import pytest

from trainstack import resolver
from trainstack.matrix import MatrixError, load_matrix
from trainstack.build_context import (
    SourceOptions,
    cuda_build,
    framework_requirements,
    horovod_build_env,
    library_requirements,
    render_dockerfile,
    write_build_context,
)

GPU_FLAVORS = ["gpu", "gpu-cu13"]


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def stages(dockerfile: str) -> tuple[str, str]:
    """(builder stage, final stage) of a rendered Dockerfile."""
    builder = dockerfile.split("AS builder")[1].split("# --- the image ---")[0]
    return builder, dockerfile.split("# --- the image ---")[1]


@pytest.mark.parametrize("name", GPU_FLAVORS)
def test_gpu_dockerfiles_match_golden(matrix, golden, name):
    golden(f"Dockerfile.{name}", render_dockerfile(matrix.flavor(name)))


def test_gpu_dockerfile_behind_a_proxy_matches_golden(matrix, golden):
    sources = SourceOptions(ca_bundle=Path("/ca.pem"))
    golden("Dockerfile.gpu-proxy", render_dockerfile(matrix.flavor("gpu"), sources))


@pytest.mark.parametrize("name", GPU_FLAVORS)
def test_cuda_build_tools_stay_in_the_builder_stage(matrix, name):
    builder, image = stages(render_dockerfile(matrix.flavor(name)))
    assert "/opt/cuda-build" in builder
    for leftover in ("/opt/cuda-build", "cuda-nvcc", "cuda-toolkit", "apt-get install", "nvidia_apt_keyring"):
        assert leftover not in image
    assert "COPY --from=builder /opt/venv /opt/venv" in image
    assert image.count("COPY --from=builder") == 1


@pytest.mark.parametrize("name", GPU_FLAVORS)
def test_horovod_links_the_frameworks_nccl_and_cudart_shared(matrix, name):
    env = horovod_build_env(matrix.flavor(name))
    assert env["HOROVOD_GPU_OPERATIONS"] == "NCCL"
    assert env["HOROVOD_NCCL_LINK"] == "SHARED"
    assert env["HOROVOD_CUDA_RUNTIME_LIBRARY"] == "Shared"
    assert env["HOROVOD_NCCL_INCLUDE"] == "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/include"
    assert env["HOROVOD_NCCL_LIB"] == "/opt/cuda-build/nccl"
    dockerfile = render_dockerfile(matrix.flavor(name))
    assert "ln -s /opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2 /opt/cuda-build/nccl/libnccl.so" in dockerfile
    assert "patch -p1 < /tmp/build/patches/horovod-0.28.1-shared-cuda-runtime.patch" in dockerfile


def test_cuda_13_build_tools_come_from_the_toolkit_wheels_torch_pins(matrix):
    build = cuda_build(matrix.flavor("gpu-cu13"))
    assert build.home == "/opt/cuda-build/nvidia/cu13"
    assert build.pip_requirements == ["cuda-toolkit[nvcc,cccl]==13.0.3"]
    assert build.links["/opt/cuda-build/nvidia/cu13/lib64"] == "lib"
    assert build.links["/opt/cuda-build/nvidia/cu13/lib/libcudart.so"] == "libcudart.so.13"
    assert build.apt_packages == []
    dockerfile = render_dockerfile(matrix.flavor("gpu-cu13"))
    assert 'RUN pip install --target /opt/cuda-build "cuda-toolkit[nvcc,cccl]==13.0.3"\n' in dockerfile


def test_cuda_12_build_tools_come_from_nvidias_apt_repository_before_any_download(matrix):
    build = cuda_build(matrix.flavor("gpu"))
    assert build.home == "/usr/local/cuda-12.8"
    assert build.apt_packages == ["cuda-nvcc-12-8", "cuda-cudart-dev-12-8"]
    assert build.apt_keyring_url == (
        "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb"
    )
    builder, _ = stages(render_dockerfile(matrix.flavor("gpu")))
    assert builder.index("nvidia_apt_keyring.py") < builder.index("pip install")


def test_proxy_ca_reaches_nvidias_apt_repository(matrix):
    builder, _ = stages(render_dockerfile(matrix.flavor("gpu"), SourceOptions(ca_bundle=Path("/ca.pem"))))
    assert "nvidia_apt_keyring.py --ca-bundle /tmp/build-ca/ca-bundle.crt" in builder
    assert "apt-get -o Acquire::https::CAInfo=/tmp/build-ca/ca-bundle.crt install" in builder


def test_cuda_wheel_pins_are_installed_with_the_frameworks(matrix):
    gpu = matrix.flavor("gpu")
    assert framework_requirements(gpu)[-3:] == ["torch==2.10.0", "tensorflow[and-cuda]==2.20.0", "nvidia-cuda-nvcc-cu12==12.8.93"]
    assert not any(line.startswith("nvidia-") for line in library_requirements(gpu))


def test_resolver_checks_the_cuda_wheel_pins_the_image_installs(matrix):
    assert resolver.framework_requirements(matrix.flavor("gpu")) == [
        "torch==2.10.0", "tensorflow[and-cuda]==2.20.0", "nvidia-cuda-nvcc-cu12==12.8.93",
    ]


def test_the_loader_is_pointed_at_the_nvidia_wheels_in_the_image(matrix):
    _, image = stages(render_dockerfile(matrix.flavor("gpu-cu13")))
    conf_step = "RUN python /opt/trainstack/bin/nvidia_ld_conf.py /etc/ld.so.conf.d/trainstack-nvidia-wheels.conf && ldconfig"
    assert image.index(conf_step) < image.index("write_manifest.py")
    assert "ldconfig" not in render_dockerfile(matrix.flavor("cpu"))


def test_build_context_holds_only_the_flavors_patches(matrix, tmp_path):
    gpu = write_build_context(matrix.flavor("gpu-cu13"), SourceOptions(), tmp_path / "gpu")
    assert sorted(path.name for path in (gpu / "patches").iterdir()) == [
        "horovod-0.28.1-current-frameworks.patch", "horovod-0.28.1-shared-cuda-runtime.patch",
        "horovod-0.28.1-spark-current-pyarrow.patch",
    ]
    assert (gpu / "scripts" / "nvidia_ld_conf.py").is_file()
    cpu = write_build_context(matrix.flavor("cpu"), SourceOptions(), tmp_path / "cpu")
    assert sorted(path.name for path in (cpu / "patches").iterdir()) == [
        "horovod-0.28.1-current-frameworks.patch", "horovod-0.28.1-spark-current-pyarrow.patch",
    ]


def test_unknown_cuda_build_tools_are_refused(matrix):
    with pytest.raises(MatrixError, match="--set cuda.build_tools = 'conda': is not one of pip, apt"):
        cuda_build(matrix.flavor("gpu-cu13", {"cuda.build_tools": "conda"}))


def test_cpu_flavor_has_no_cuda_build(matrix):
    assert cuda_build(matrix.flavor("cpu")) is None
    assert "HOROVOD_NCCL_LINK" not in horovod_build_env(matrix.flavor("cpu"))
