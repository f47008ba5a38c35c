import dataclasses
from pathlib import Path

import pytest

from trainstack.errors import TrainstackError
from trainstack.image import resolver
from trainstack.image.build_context import write_build_context
from trainstack.image.components import horovod_build_env
from trainstack.image.cuda_build import cuda_build
from trainstack.image.dockerfile import render_dockerfile
from trainstack.image.matrix import MatrixError, load_matrix
from trainstack.image.requirements import framework_requirements, library_requirements
from trainstack.image.sources import SourceOptions, check_sources, sources_for

GPU_FLAVORS = ["gpu", "gpu-cu13"]
NVIDIA_APT = {"cuda.build_tools": "apt"}


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def stages(dockerfile: str) -> tuple[str, str]:
    """(the builder stages, from frameworks to builder; the image's own stages, image-os and the last) of a rendered
    Dockerfile."""
    builder = dockerfile.split("AS frameworks")[1].split("# --- the image ---")[0]
    image_os = dockerfile.split("AS image-os")[1].split("\n# --- ")[0]
    return builder, image_os + dockerfile.split("# --- the image ---")[1]


@pytest.mark.parametrize("name", GPU_FLAVORS)
def test_gpu_dockerfiles_match_golden(matrix, golden, name):
    golden(f"Dockerfile.{name}", render_dockerfile(matrix.flavor(name)))


def test_gpu_dockerfile_behind_a_proxy_matches_golden(matrix, golden):
    sources = SourceOptions(ca_bundle=Path("/ca.pem"))
    golden("Dockerfile.gpu-proxy", render_dockerfile(matrix.flavor("gpu"), sources))


def test_gpu_dockerfile_with_nvidias_apt_repository_matches_golden(matrix, golden):
    golden("Dockerfile.gpu-apt", render_dockerfile(matrix.flavor("gpu", NVIDIA_APT)))


@pytest.mark.parametrize("name", GPU_FLAVORS)
def test_cuda_build_tools_stay_in_the_builder_stage(matrix, name):
    builder, image = stages(render_dockerfile(matrix.flavor(name)))
    assert "/opt/cuda-build" in builder
    for leftover in ("/opt/cuda-build", "cuda-nvcc", "cuda-toolkit", "nvidia_apt_keyring", "nvcc"):
        assert leftover not in image
    # The one package install there is torch.compile's toolchain (test_render.py).
    assert [line for line in image.splitlines() if "apt-get install" in line] == [
        " && apt-get install -y --no-install-recommends gcc g++ libc6-dev libpython3-dev \\"]
    # From the builder, the venv's layers and their report only.
    copies = [line for line in image.splitlines() if line.startswith("COPY --from=builder")]
    assert copies == [*(f"COPY --from=builder /tmp/build/venv-layers/{layer.name}/ /"
                        for layer in matrix.flavor(name).venv_layers),
                      "COPY --from=builder /tmp/build/venv-layers-report/ /"]
    assert copies[0] == "COPY --from=builder /tmp/build/venv-layers/nvidia/ /"


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
    assert build.pip_requirements == ["cuda-toolkit[nvcc,cccl]==13.2.2"]
    assert build.links["/opt/cuda-build/nvidia/cu13/lib64"] == "lib"
    assert build.links["/opt/cuda-build/nvidia/cu13/lib/libcudart.so"] == "libcudart.so.13"
    assert build.apt_packages == []
    dockerfile = render_dockerfile(matrix.flavor("gpu-cu13"))
    assert 'RUN pip install --target /opt/cuda-build "cuda-toolkit[nvcc,cccl]==13.2.2"\n' in dockerfile


def test_cuda_12_build_tools_come_from_debian_trixie_packages_before_any_download(matrix):
    build = cuda_build(matrix.flavor("gpu"))
    assert build.home == "/opt/cuda-build/debian-cuda"
    assert build.apt_packages == [] and build.pip_requirements == []
    assert build.debian_toolkit_command == (
        "python3 /tmp/build/scripts/debian_cuda_toolkit.py --mirror http://deb.debian.org/debian --suite trixie"
        " --components main non-free --home /opt/cuda-build/debian-cuda"
        " --cudart /opt/venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12"
        " 'nvidia-cuda-toolkit=12.4.131~12.4.1-2' 'nvidia-cuda-dev=12.4.127~12.4.1-2' libcu++-dev=2.3.2-2"
        " libthrust-dev=2.3.2-2 libcub-dev=2.3.2-2"
    )
    builder, _ = stages(render_dockerfile(matrix.flavor("gpu")))
    assert builder.index("debian_cuda_toolkit.py") < builder.index("pip install")
    assert "apt-get install" not in builder.split("debian_cuda_toolkit.py", 1)[1]


def test_debian_package_versions_reach_the_shell_quoted(matrix):
    with pytest.raises(MatrixError, match=r"--set cuda.debian_suite = 'trixie; rm -rf /': is not"):
        matrix.flavor("gpu", {"cuda.debian_suite": "trixie; rm -rf /"})
    # Past the schema, which refuses it first, the value still reaches the shell as one quoted word.
    flavor = matrix.flavor("gpu")
    cuda = {**flavor.components["cuda"], "debian_suite": "trixie; rm -rf /"}
    unchecked = dataclasses.replace(flavor, components={**flavor.components, "cuda": cuda})
    assert "--suite 'trixie; rm -rf /'" in cuda_build(unchecked).debian_toolkit_command


def test_debian_build_tools_need_mirror_suite_and_packages(matrix):
    with pytest.raises(MatrixError, match="needs cuda.debian_mirror, cuda.debian_suite and cuda.debian_packages"):
        cuda_build(matrix.flavor("gpu-cu13", {"cuda.build_tools": "debian"}))


def test_proxy_ca_reaches_the_cuda_build_tool_sources(matrix):
    sources = SourceOptions(ca_bundle=Path("/ca.pem"))
    builder, _ = stages(render_dockerfile(matrix.flavor("gpu"), sources))
    assert "libcub-dev=2.3.2-2 --ca-bundle /tmp/build-ca/ca-bundle.crt\n" in builder
    builder, _ = stages(render_dockerfile(matrix.flavor("gpu", NVIDIA_APT), sources))
    assert "nvidia_apt_keyring.py --ca-bundle /tmp/build-ca/ca-bundle.crt" in builder
    assert "apt-get -o Acquire::https::CAInfo=/tmp/build-ca/ca-bundle.crt install" in builder


def test_cuda_12_build_tools_can_come_from_nvidias_apt_repository_before_any_download(matrix):
    build = cuda_build(matrix.flavor("gpu", NVIDIA_APT))
    assert build.home == "/usr/local/cuda-12.8"
    assert build.apt_packages == ["cuda-nvcc-12-8", "cuda-cudart-dev-12-8", "cuda-cuobjdump-12-8"]
    assert build.apt_keyring_url == (
        "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb"
    )
    builder, _ = stages(render_dockerfile(matrix.flavor("gpu", NVIDIA_APT)))
    assert builder.index("nvidia_apt_keyring.py") < builder.index("pip install")


@pytest.mark.parametrize("overrides", [{}, NVIDIA_APT])
def test_horovods_kernels_are_checked_for_every_architecture_after_its_build(matrix, overrides):
    flavor = matrix.flavor("gpu", overrides)
    assert horovod_build_env(flavor)["HOROVOD_BUILD_CUDA_CC_LIST"] == "70,75,80,86,89,90"
    home = cuda_build(flavor).home
    check = (f"RUN python /tmp/build/scripts/check_cuda_kernels.py --cuobjdump {home}/bin/cuobjdump"
             " --architectures 70,75,80,86,89,90 /opt/venv/lib/python3.11/site-packages/horovod\n")
    builder, _ = stages(render_dockerfile(flavor))
    # In the builder, on Horovod as its stage compiled it.
    assert builder.index("COPY --from=horovod") < builder.index(check) < builder.index("COPY --from=deepspeed")


def test_cuda_13_flavor_names_no_architectures_and_gets_no_kernel_check(matrix):
    assert cuda_build(matrix.flavor("gpu-cu13")).kernel_check_command is None
    assert "check_cuda_kernels.py" not in render_dockerfile(matrix.flavor("gpu-cu13"))


@pytest.mark.parametrize("name", GPU_FLAVORS)
def test_cuda_headers_of_the_wheels_stay_in_the_builder(matrix, name):
    builder, _ = stages(render_dockerfile(matrix.flavor(name)))
    assert " && rm -rf tensorflow/include nvidia/*/include \\\n" in builder
    assert "nvidia/*/include" not in render_dockerfile(matrix.flavor("cpu"))


@pytest.mark.parametrize("name", GPU_FLAVORS)
def test_a_cpu_torch_in_the_wheelhouse_is_refused_for_gpu_flavors(matrix, tmp_path, name):
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    sources = SourceOptions(wheelhouse=tmp_path)
    with pytest.raises(TrainstackError, match=r"torch-2\.13\.0\+cpu.*is torch 2\.13\.0\+cpu, not a CUDA .* build"):
        check_sources(matrix.flavor(name), sources)
    with pytest.raises(TrainstackError, match="without --wheelhouse"):
        sources_for(matrix.flavor(name), wheelhouse=str(tmp_path))
    check_sources(matrix.flavor("cpu"), sources)


def test_a_cpu_torch_wheelhouse_from_the_environment_is_left_out_for_gpu_flavors(matrix, tmp_path, monkeypatch, capsys):
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    monkeypatch.setenv("TRAINSTACK_WHEELHOUSE", str(tmp_path))
    assert sources_for(matrix.flavor("gpu")).wheelhouse is None
    assert capsys.readouterr().err == (f"note: $TRAINSTACK_WHEELHOUSE ({tmp_path}) is not used for the gpu flavor: "
                                       "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl is not a CUDA 12.8 build of torch\n")
    assert sources_for(matrix.flavor("cpu")).wheelhouse == tmp_path
    with pytest.raises(TrainstackError, match="without --wheelhouse"):
        check_sources(matrix.flavor("gpu"), sources_for(matrix.flavor("gpu"), wheelhouse=str(tmp_path)))


def test_a_wheelhouse_without_a_foreign_torch_build_is_accepted(matrix, tmp_path):
    (tmp_path / "torch-2.10.0+cu128-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    (tmp_path / "pyarrow-26.0.1-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    check_sources(matrix.flavor("gpu"), SourceOptions(wheelhouse=tmp_path))


def test_cuda_wheel_pins_are_installed_with_the_frameworks(matrix):
    gpu = matrix.flavor("gpu")
    assert framework_requirements(gpu)[-4:] == ["torch==2.10.0", "torchvision==0.25.0", "tensorflow[and-cuda]==2.20.0",
                                                "nvidia-cuda-nvcc-cu12==12.8.93"]
    assert not any(line.startswith("nvidia-") for line in library_requirements(gpu))


def test_resolver_checks_the_requirements_the_image_installs(matrix):
    gpu = matrix.flavor("gpu")
    assert resolver.gpu_framework_requirements(gpu) == framework_requirements(gpu)
    assert framework_requirements(gpu)[2:] == [
        "torch==2.10.0", "torchvision==0.25.0", "tensorflow[and-cuda]==2.20.0", "nvidia-cuda-nvcc-cu12==12.8.93",
    ]


def test_the_loader_is_pointed_at_the_nvidia_wheels_in_the_image(matrix):
    _, image = stages(render_dockerfile(matrix.flavor("gpu-cu13")))
    conf_step = " && python /opt/trainstack/bin/nvidia_ld_conf.py /etc/ld.so.conf.d/trainstack-nvidia-wheels.conf && ldconfig \\"
    assert image.index(conf_step) < image.index("write_manifest.py")
    assert "ldconfig" not in render_dockerfile(matrix.flavor("cpu"))


def test_build_context_holds_only_the_flavors_patches(matrix, tmp_path):
    gpu = write_build_context(matrix.flavor("gpu-cu13"), SourceOptions(), tmp_path / "gpu")
    pyspark = ["pyspark-4.3.0-daemon-closed-reader.patch", "pyspark-4.3.0-distributor-rank0-output.patch",
               "pyspark-4.3.0-distributor-whole-gpus.patch",
               "pyspark-4.3.0-reap-stopped-wrapper.patch", "pyspark-4.3.0-rendezvous-port-below-ephemeral.patch",
               "pyspark-4.3.0-script-exit-status.patch",
               "pyspark-4.3.0-streamed-line-once.patch", "pyspark-4.3.0-unbuffered-ranks.patch"]
    assert sorted(path.name for path in (gpu / "patches").iterdir()) == [
        "horovod-0.28.1-current-frameworks.patch", "horovod-0.28.1-current-toolchains.patch",
        "horovod-0.28.1-estimator-predictions.patch",
        "horovod-0.28.1-script-without-main-guard.patch", "horovod-0.28.1-shared-cuda-runtime.patch",
        "horovod-0.28.1-spark-current-pyarrow.patch", *pyspark, "ray-2.60.0-executor-sized-worker-nodes.patch",
    ]
    assert (gpu / "scripts" / "nvidia_ld_conf.py").is_file()
    cpu = write_build_context(matrix.flavor("cpu"), SourceOptions(), tmp_path / "cpu")
    assert sorted(path.name for path in (cpu / "patches").iterdir()) == [
        "deepspeed-0.19.8-debug-info-option.patch", "deepspeed-0.19.8-numa-count-once.patch",
        "deepspeed-0.19.8-portable-cpu-ops.patch", "horovod-0.28.1-common-once.patch",
        "horovod-0.28.1-current-frameworks.patch", "horovod-0.28.1-current-toolchains.patch",
        "horovod-0.28.1-estimator-predictions.patch", "horovod-0.28.1-gloo-once.patch",
        "horovod-0.28.1-keras-sparse-labels.patch", "horovod-0.28.1-keras3.patch",
        "horovod-0.28.1-script-without-main-guard.patch", "horovod-0.28.1-spark-current-pyarrow.patch",
        "horovod-0.28.1-spark-keras-estimator.patch", *sorted([*pyspark, "pyspark-4.3.0-deepspeed-config-check.patch"]),
        "ray-2.60.0-executor-sized-worker-nodes.patch",
    ]


def test_unknown_cuda_build_tools_are_refused(matrix):
    with pytest.raises(MatrixError, match=r"--set cuda.build_tools = 'conda': is not an allowed value \(valid: pip, apt, debian\)"):
        cuda_build(matrix.flavor("gpu-cu13", {"cuda.build_tools": "conda"}))


def test_cpu_flavor_has_no_cuda_build(matrix):
    assert cuda_build(matrix.flavor("cpu")) is None
    assert "HOROVOD_NCCL_LINK" not in horovod_build_env(matrix.flavor("cpu"))


def test_tritons_bundled_cupti_gives_way_to_the_cuda_wheels_copy_of_its_major(matrix):
    builder, _ = stages(render_dockerfile(matrix.flavor("gpu")))
    assert (" && rm -rf triton/backends/nvidia/lib/cupti \\\n && mkdir triton/backends/nvidia/lib/cupti \\\n"
            " && ln -s ../../../../../nvidia/cuda_cupti/lib/libcupti.so.12 triton/backends/nvidia/lib/cupti/libcupti.so \\\n"
            ) in builder
    # gpu-cu13: Triton's CUPTI 12 (for GPUs before sm_100) and CUPTI 13 (sm_100 and later) give way to the CUDA 13
    # wheel's, which torch's profiler loads.
    builder, _ = stages(render_dockerfile(matrix.flavor("gpu-cu13")))
    for folder in ("cupti", "cupti-blackwell"):
        path = f"triton/backends/nvidia/lib/{folder}"
        assert (f" && rm -rf {path} \\\n && mkdir {path} \\\n"
                f" && ln -s ../../../../../nvidia/cu13/lib/libcupti.so.13 {path}/libcupti.so \\\n") in builder
