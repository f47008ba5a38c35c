import json
import os
from pathlib import Path

import pytest

from trainstack.image.matrix import Flavor
from trainstack.image.resolver import (
    ResolverError,
    clean_pip_env,
    compare_with_flavor,
    dry_run_arguments,
    gpu_framework_requirements,
    resolution_failure,
    resolved_versions,
)

FIXTURES = Path(__file__).parent / "fixtures"


def make_flavor(name: str = "gpu", **versions: str) -> Flavor:
    components = {component: {"version": version} for component, version in versions.items()}
    return Flavor(name, "test flavor", "debian:bookworm-slim", components, {})


CU12 = make_flavor(python="3.11", cuda="12.8", cudnn="9.10.2.21", nccl="2.27.5", torch="2.10.0", tensorflow="2.20.0")
CU13 = make_flavor("gpu-cu13", python="3.11", cuda="13.0", cudnn="9.20.0.48", nccl="2.29.7", torch="2.13.0")
CU13_RESOLVED = {"cuda-toolkit": "13.0.3.0", "nvidia-cudnn-cu13": "9.20.0.48", "nvidia-nccl-cu13": "2.29.7"}


@pytest.fixture
def resolved() -> dict[str, str]:
    return resolved_versions(json.loads((FIXTURES / "pip-report-gpu.json").read_text()))


def test_report_gives_canonical_names_and_versions(resolved):
    assert resolved["torch"] == "2.10.0"
    assert resolved["nvidia-nccl-cu12"] == "2.27.5"
    assert resolved["markupsafe"] == "3.0.4"
    assert len(resolved) == 7


def test_resolution_matching_the_flavor_has_no_mismatch(resolved):
    assert compare_with_flavor(CU12, resolved) == []


def test_cuda_is_compared_by_major_minor(resolved):
    assert compare_with_flavor(CU12, {**resolved, "nvidia-cuda-runtime-cu12": "12.8.57"}) == []
    assert compare_with_flavor(CU12, {**resolved, "nvidia-cuda-runtime-cu12": "12.9.79"}) == [
        "cuda: matrix says 12.8, pip resolves nvidia-cuda-runtime-cu12 12.9.79"
    ]


def test_other_cudnn_and_nccl_are_reported_with_both_versions(resolved):
    mismatches = compare_with_flavor(CU12, {**resolved, "nvidia-cudnn-cu12": "9.8.0.87", "nvidia-nccl-cu12": "2.26.2"})
    assert mismatches == [
        "cudnn: matrix says 9.10.2.21, pip resolves nvidia-cudnn-cu12 9.8.0.87",
        "nccl: matrix says 2.27.5, pip resolves nvidia-nccl-cu12 2.26.2",
    ]


def test_missing_library_is_reported(resolved):
    del resolved["nvidia-nccl-cu12"]
    assert compare_with_flavor(CU12, resolved) == ["nccl: matrix says 2.27.5, but pip resolves no nvidia-nccl wheel"]


def test_cuda_toolkit_stands_in_for_a_missing_runtime_wheel():
    assert compare_with_flavor(CU13, CU13_RESOLVED) == []
    assert compare_with_flavor(CU13, {**CU13_RESOLVED, "cuda-toolkit": "13.2.0"}) == [
        "cuda: matrix says 13.0, pip resolves cuda-toolkit 13.2.0"
    ]


def test_library_under_two_cuda_majors_is_reported():
    mismatches = compare_with_flavor(CU13, {**CU13_RESOLVED, "nvidia-nccl-cu12": "2.27.5"})
    assert (
        "nvidia-nccl is resolved twice, for different CUDA majors: nvidia-nccl-cu12 2.27.5, nvidia-nccl-cu13 2.29.7"
        in mismatches
    )
    assert "nvidia-nccl-cu12 2.27.5 is built for CUDA 12, the flavor is on CUDA 13" in mismatches


def test_conflict_names_the_conflicting_requirement_and_its_parties():
    failure = resolution_failure((FIXTURES / "pip-conflict-output.txt").read_text())
    assert failure == (
        "conflict on nvidia-nccl-cu12: torch 2.10.0 depends on nvidia-nccl-cu12==2.27.5; "
        "tensorflow[and-cuda] 2.21.0 depends on nvidia-nccl-cu12<3.0 and >=2.27.7"
    )


def test_failure_without_conflict_gives_pip_errors():
    output = "Collecting torch==9.9\nERROR: No matching distribution found for torch==9.9\n"
    assert resolution_failure(output) == "No matching distribution found for torch==9.9"


def test_requirements_are_the_frameworks_as_the_gpu_image_installs_them():
    build_tools = ["setuptools==80.9.0", "wheel==0.45.1"]
    assert gpu_framework_requirements(CU12) == [*build_tools, "torch==2.10.0", "tensorflow[and-cuda]==2.20.0"]
    assert gpu_framework_requirements(CU13) == [*build_tools, "torch==2.13.0"]
    with pytest.raises(ResolverError, match="only GPU flavors"):
        gpu_framework_requirements(make_flavor("cpu", torch="2.13.0+cpu"))


def test_pip_sees_neither_local_config_nor_find_links(monkeypatch, tmp_path):
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    env = clean_pip_env()
    assert "PIP_FIND_LINKS" not in env
    assert env["PIP_CONFIG_FILE"] == os.devnull
    arguments = dry_run_arguments("3.11", tmp_path / "report.json")
    assert {"--isolated", "--dry-run", "--ignore-installed", "https://pypi.org/simple"} <= set(arguments)
    assert {"manylinux_2_36_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"} <= set(arguments)
    assert "--find-links" not in arguments
