"""benchmarks/gpu_host.py without a GPU: the recipe it derives from a flavor's Horovod build for a host, and the report
and table it writes from its steps' outputs."""
from __future__ import annotations

import importlib.util
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from trainstack.image import cuda_build
from trainstack.image.horovod_source import horovod_source
from trainstack.image.matrix import load_matrix

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu_host.py"
SPEC = importlib.util.spec_from_file_location("gpu_host", SCRIPT)
gpu_host = importlib.util.module_from_spec(SPEC)
sys.modules["gpu_host"] = gpu_host  # dataclasses look their module up by name
SPEC.loader.exec_module(gpu_host)

HOST_SITE = "/opt/torch/.venv/lib/python3.12/site-packages"
CHECK_BUILD = """\
Horovod v0.28.1:

Available Frameworks:
    [ ] TensorFlow
    [X] PyTorch
    [ ] MXNet

Available Controllers:
    [X] MPI
    [X] Gloo

Available Tensor Operations:
    [X] NCCL
    [ ] DDL
    [ ] CCL
    [X] MPI
    [X] Gloo
"""


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def h200(site: str = HOST_SITE, **changes) -> "gpu_host.HostFacts":
    """The 2026-11-27 host: torch 2.11.0+cu130, nvcc 13.0, the NCCL wheel, Open MPI, 16 cores, one H200."""
    facts = gpu_host.HostFacts(
        python="/opt/torch/.venv/bin/python", python_version="3.12.3", site_packages=[site], torch="2.11.0+cu130",
        torch_cuda="13.0", gpus=[{"name": "NVIDIA H200", "capability": "90"}], nccl="2.28.9",
        modules={"tensorflow": "ModuleNotFoundError: No module named 'tensorflow'", "lightning": None,
                 "deepspeed": None},
        cuda_home="/usr/local/cuda-13.0", nvcc_version="13.0", mpicxx="/usr/bin/mpicxx", cpus=16)
    for name, value in changes.items():
        setattr(facts, name, value)
    return facts


def nccl_wheel(root: Path) -> str:
    site = root / "site-packages"
    (site / "nvidia" / "nccl" / "include").mkdir(parents=True)
    (site / "nvidia" / "nccl" / "lib").mkdir()
    (site / "nvidia" / "nccl" / "include" / "nccl.h").write_text("")
    (site / "nvidia" / "nccl" / "lib" / "libnccl.so.2").write_text("")
    return str(site)


def recipe_for(matrix, name: str, facts, work: Path):
    flavor = matrix.flavor(name)
    build = cuda_build.cuda_build(flavor)
    return gpu_host.derive_recipe(horovod_source(flavor), flavor.site_packages, build.links if build else {},
                                  cuda_build.CUDA_BUILD_PREFIX, build.home if build else None, facts, work)


def test_without_a_gpu_it_says_so_in_one_line():
    assert gpu_host.no_gpu_reason(h200(gpus=[])) == "no GPU: torch 2.11.0+cu130 (CUDA 13.0) sees no CUDA device"
    assert gpu_host.no_gpu_reason(h200(torch_cuda=None, torch="2.13.0+cpu")).startswith("no GPU: torch 2.13.0+cpu")
    assert "torch does not import" in gpu_host.no_gpu_reason(h200(torch=None, torch_error="ModuleNotFoundError"))
    assert gpu_host.no_gpu_reason(h200()) is None


def test_the_flavor_is_the_one_of_torchs_cuda_major(matrix):
    flavors = {name: str(matrix.flavor(name).version("cuda")) for name in matrix.flavors if matrix.flavor(name).gpu}
    assert gpu_host.choose_flavor(flavors, h200()) == "gpu-cu13"
    assert gpu_host.choose_flavor(flavors, h200(torch_cuda="12.8")) == "gpu"
    with pytest.raises(ValueError, match="no GPU flavor has CUDA 11"):
        gpu_host.choose_flavor(flavors, h200(torch_cuda="11.8"))


def test_the_recipe_is_the_flavors_build_on_the_hosts_toolkit_and_nccl_wheel(matrix, tmp_path):
    site = nccl_wheel(tmp_path)
    recipe = recipe_for(matrix, "gpu-cu13", h200(site=site), tmp_path / "work")
    source = horovod_source(matrix.flavor("gpu-cu13"))
    assert recipe.problems == []
    assert recipe.patches == list(source.patches) and "horovod-0.28.1-current-toolchains.patch" in recipe.patches
    assert recipe.version == "0.28.1"
    # What the 2026-11-27 build ran with, by hand.
    assert recipe.env == {
        "LDFLAGS": "-Wl,--build-id=none", "CMAKE_POLICY_VERSION_MINIMUM": "3.5", "HOROVOD_WITH_PYTORCH": "1",
        "HOROVOD_WITH_MPI": "1", "HOROVOD_WITH_GLOO": "1", "HOROVOD_WITHOUT_TENSORFLOW": "1",
        "HOROVOD_WITHOUT_MXNET": "1", "HOROVOD_GPU_OPERATIONS": "NCCL", "HOROVOD_CUDA_HOME": "/usr/local/cuda-13.0",
        "CUDA_HOME": "/usr/local/cuda-13.0", "HOROVOD_CUDA_RUNTIME_LIBRARY": "Shared", "HOROVOD_NCCL_LINK": "SHARED",
        "HOROVOD_NCCL_INCLUDE": f"{site}/nvidia/nccl/include",
        "HOROVOD_NCCL_LIB": str(tmp_path / "work/cuda-build/nccl"),
        "HOROVOD_BUILD_CUDA_CC_LIST": "90", "MAKEFLAGS": "-j16"}
    # The flavor's libnccl.so link, moved; the toolkit wheel's own links stay out for a host toolkit.
    assert recipe.links == {str(tmp_path / "work/cuda-build/nccl/libnccl.so"): f"{site}/nvidia/nccl/lib/libnccl.so.2"}
    assert any("nvcc 13.0 from /usr/local/cuda-13.0" in note for note in recipe.notes)
    assert any("HOROVOD_BUILD_CUDA_CC_LIST=90" in note for note in recipe.notes)


def test_the_flavors_toolkit_wheels_under_work_get_the_flavors_links(matrix, tmp_path):
    work = tmp_path / "work"
    recipe = recipe_for(matrix, "gpu-cu13", h200(site=nccl_wheel(tmp_path),
                                                 cuda_home=str(work / "cuda-build/nvidia/cu13")), work)
    assert recipe.links[str(work / "cuda-build/nvidia/cu13/lib64")] == "lib"
    assert recipe.links[str(work / "cuda-build/nvidia/cu13/lib/libcudart.so")] == "libcudart.so.13"
    assert not any(note.startswith("nvcc") for note in recipe.notes)


def test_the_gpu_flavor_on_a_host_without_tensorflow_or_mpi_builds_what_the_host_has(matrix, tmp_path):
    recipe = recipe_for(matrix, "gpu", h200(site=nccl_wheel(tmp_path), torch_cuda="12.8", mpicxx=None,
                                            gpus=[{"name": "A100", "capability": "80"},
                                                  {"name": "A100", "capability": "80"}]), tmp_path / "work")
    assert recipe.env["HOROVOD_WITHOUT_TENSORFLOW"] == "1" and "HOROVOD_WITH_TENSORFLOW" not in recipe.env
    assert recipe.env["HOROVOD_WITHOUT_MPI"] == "1" and "HOROVOD_WITH_MPI" not in recipe.env
    assert recipe.env["HOROVOD_BUILD_CUDA_CC_LIST"] == "80"
    assert "horovod-0.28.1-keras3.patch" in recipe.patches
    assert len(recipe.notes) == 4  # nvcc, the architectures, TensorFlow, MPI
    assert any("(the image's: 70,75,80,86,89,90)" in note for note in recipe.notes)


def test_what_stops_the_build_is_one_line_each(matrix, tmp_path):
    recipe = recipe_for(matrix, "gpu-cu13", h200(site=str(tmp_path), cuda_home=None, nvcc_version=None,
                                                 cuda_searched=["/usr/local/cuda-13.0", "/usr/local/cuda"]),
                        tmp_path / "work")
    assert len(recipe.problems) == 2
    assert recipe.problems[0].startswith(
        "no nvcc of CUDA 13 (torch's): looked in /usr/local/cuda-13.0, /usr/local/cuda")
    assert recipe.problems[1].startswith(f"no NCCL wheel beside torch: {tmp_path}/nvidia/nccl/include/nccl.h")
    step = gpu_host.build_step(recipe, tmp_path / "horovod.tar.gz", h200(), {}, tmp_path)
    assert step.status == "failed" and step.line == "; ".join(recipe.problems)


def test_check_build_output_becomes_one_line():
    line, sections = gpu_host.horovod_check_build(CHECK_BUILD)
    assert line == "NCCL, MPI, Gloo operations; MPI, Gloo controllers; PyTorch frameworks"
    assert sections["Available Controllers"] == ["MPI", "Gloo"]


def test_an_examples_summary_line_is_found_behind_a_launchers_tag():
    output = ('epoch 0 loss 1.3140\n[1,0]<stdout>:rank 0 wrote checkpoints/model.pt\n'
              '[1,0]<stdout>:{"workflow": "horovod-torch", "ranks": 1, "losses": [1.314], "accuracy": 0.959}\n')
    passed, line, details = gpu_host.judge_example(0, output)
    assert passed and line == "horovod-torch, 1 rank(s), accuracy 0.959" and details["ranks"] == 1
    passed, line, _ = gpu_host.judge_example(1, "Traceback ...\nRuntimeError: NCCL error\n")
    assert not passed and line == "exit 1: RuntimeError: NCCL error"
    output = ("[1,0]<stderr>:Traceback (most recent call last):\n"
              "[1,0]<stderr>:ModuleNotFoundError: No module named 'horovod'\n"
              "trainrun: rank 0 exited with code 1; job stopped (1 rank of mpi (openmpi), 2.4 s)\n")
    assert gpu_host.judge_example(1, output)[1] == (
        "exit 1: ModuleNotFoundError: No module named 'horovod' (trainrun: rank 0 exited with code 1; job stopped "
        "(1 rank of mpi (openmpi), 2.4 s))")


def test_selftest_and_doctor_reports_become_one_line():
    selftest = {"ok": True, "path": "gpu", "failures": [], "allreduce": [
        {"title": "torch.distributed", "transport": "nccl", "results": [{}] * 9},
        {"title": "horovod.torch", "transport": "nccl", "results": [{}] * 9}]}
    judge = gpu_host.judge_json(gpu_host.selftest_line)
    passed, line, details = judge(0, "progress on stderr\n" + json.dumps(selftest, indent=2))
    assert passed and details["path"] == "gpu"
    assert line == "gpu path: torch.distributed (nccl) 9 sizes exact; horovod.torch (nccl) 9 sizes exact"
    failed = {**selftest, "ok": False, "failures": ["allreduce: horovod.torch (nccl), 1 rank: 8 B WRONG"]}
    assert judge(1, json.dumps(failed))[:2] == (False, "allreduce: horovod.torch (nccl), 1 rank: 8 B WRONG")
    assert judge(1, "Traceback\nImportError: x\n")[:2] == (False, "no JSON report; exit 1: ImportError: x")
    doctor = {"ok": True, "checks": [{"name": "gpu", "status": "ok", "detail": "1 GPU"},
                                     {"name": "mpi-cma", "status": "warn", "detail": "single copy none"}]}
    assert gpu_host.doctor_line(doctor) == "ready to train (warnings: mpi-cma)"


def test_a_step_that_cannot_start_or_times_out_is_one_line_and_the_run_goes_on(tmp_path):
    missing = gpu_host.run_step("doctor", [str(tmp_path / "no-such-trainrun"), "doctor"], {}, tmp_path, 5,
                                gpu_host.judge_by_exit, tmp_path / "doctor.log")
    assert missing.status == "failed" and missing.line.startswith(f"cannot run {tmp_path}/no-such-trainrun")
    slow = gpu_host.run_step("slow", [sys.executable, "-c", "import time; print('started', flush=True); "
                                                          "time.sleep(5)"], {}, tmp_path, 0.5,
                             gpu_host.judge_by_exit, tmp_path / "slow.log")
    assert slow.status == "failed" and slow.line.startswith("timed out after 0 s")


def test_the_report_holds_every_step_and_the_table_one_row_each(tmp_path):
    steps = [gpu_host.Step("build horovod", "passed", "built in 112 s on 16 cores", 112.0),
             gpu_host.Step("horovod, trainrun mpi", "failed", "exit 1: RuntimeError: NCCL error", 3.2),
             gpu_host.Step("deepspeed zero-2", "skipped", "deepspeed does not import here")]
    started = datetime(2026, 11, 27, 12, 0, tzinfo=timezone.utc)
    report = gpu_host.build_report(h200(), None, steps, started, 130.04)
    assert report["ok"] is False and report["failed"] == ["horovod, trainrun mpi"]
    assert report["machine"].endswith(", 16 cores, NVIDIA H200")
    assert [step["status"] for step in report["steps"]] == ["passed", "failed", "skipped"]
    assert report["seconds"] == 130.0 and report["measured_at"] == "2026-11-27T12:00:00+00:00"
    json.dumps(report)
    table = gpu_host.format_table(steps).splitlines()
    assert len(table) == 4 and table[2].split()[:3] == ["horovod,", "trainrun", "mpi"]
    assert "failed" in table[2] and table[2].endswith("exit 1: RuntimeError: NCCL error")
