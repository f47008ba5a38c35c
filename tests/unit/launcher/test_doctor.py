"""Doctor rules judged on injected facts: no GPU, driver or manifest needed."""
from __future__ import annotations

import dataclasses
import errno
import importlib.util
import os

import pytest

from trainrun import cma
from trainrun.compile_cache import compiler_caches, inductor_cache_dir, noexec_mount, noexec_problem, noexec_problems
from trainrun.doctor import Facts, format_checks, run_checks
from trainrun.machine import default_route_interface

MANIFEST = {"flavor": "cuda", "python": "3.11.2",
            "packages": {"torch": "2.13.0+cu128", "horovod": "0.28.1", "pyspark": "4.3.0"},
            "libraries": {"openmpi": "4.1.4", "java": "17.0.15", "cuda": "12.8", "cudnn": "9", "nccl": "2.27"}}
HEALTHY = Facts(
    manifest_path="/etc/trainstack/manifest.json", manifest=MANIFEST,
    packages={"torch": "2.13.0+cu128", "horovod": "0.28.1", "pyspark": "4.3.0"},
    gpu_count=8, driver_version="570.1", driver_cuda="12.8", shm_bytes=16 << 30,
    primary_interface="eth0", interfaces=("eth0", "lo"), mpi="openmpi 4.1.4", java="17.0.15", environ={},
)


def statuses(facts: Facts) -> dict[str, str]:
    return {c.name: c.status for c in run_checks(facts)}


def find(facts: Facts, name: str):
    return next(c for c in run_checks(facts) if c.name == name)


def test_healthy_gpu_image_passes_with_nccl_hints() -> None:
    assert "fail" not in statuses(HEALTHY).values()
    assert "NCCL_P2P_DISABLE=1" in find(HEALTHY, "nccl-p2p").hint
    assert "NCCL_SOCKET_IFNAME=eth0" in find(HEALTHY, "nccl-socket").hint


def test_plain_cpu_host_without_manifest_is_fine() -> None:
    facts = Facts("/etc/trainstack/manifest.json", None, {"torch": "2.13.0+cpu"}, shm_bytes=2 << 30,
                  primary_interface="eth0", mpi=None, java=None)
    result = statuses(facts)
    assert result["manifest"] == "ok" and result["gpu"] == "ok"
    assert result["mpi"] == "warn" and result["java"] == "warn"
    assert "fail" not in result.values()


@pytest.mark.parametrize("changes,name,status,text", [
    ({"driver_cuda": "11.8"}, "cuda", "fail", "upgrade the NVIDIA driver"),
    ({"driver_cuda": "12.4"}, "cuda", "warn", "minor-version compatibility"),
    ({"packages": {"torch": "2.12.0", "horovod": "0.28.1", "pyspark": "4.3.0"}}, "torch", "fail",
     "the image manifest says 2.13.0+cu128"),
    ({"packages": {"torch": "2.13.0+cu128", "horovod": None, "pyspark": "4.3.0"}}, "horovod", "fail",
     "not installed"),
    ({"shm_bytes": 64 << 20}, "/dev/shm", "fail", "--shm-size"),
    ({"shm_bytes": 64 << 20, "gpu_count": 0}, "/dev/shm", "warn", "too small"),
    ({"mpi": None}, "mpi", "fail", "openmpi-bin"),
    ({"java": None}, "java", "fail", "openjdk-17"),
    ({"environ": {"NCCL_SOCKET_IFNAME": "ib9"}}, "nccl-socket", "fail", "NCCL_SOCKET_IFNAME=eth0"),
    ({"primary_interface": None}, "nccl-socket", "warn", "NCCL_SOCKET_IFNAME"),
])
def test_rules(changes, name, status, text) -> None:
    check = find(dataclasses.replace(HEALTHY, **changes), name)
    assert check.status == status
    assert text in check.detail + check.hint


@pytest.mark.parametrize("cuda,minimum", [("12.8.90", "525.60.13"), ("13.0.96", "580")])
def test_gpu_image_without_a_gpu_names_the_driver_minimum_and_the_missing_runtime(cuda, minimum) -> None:
    manifest = {**MANIFEST, "libraries": {**MANIFEST["libraries"], "cuda": cuda}}
    facts = dataclasses.replace(HEALTHY, manifest=manifest, gpu_count=0, driver_version=None, driver_cuda=None)
    check = find(facts, "gpu")
    assert check.status == "warn"
    assert f"needs an NVIDIA driver >= {minimum}" in check.detail
    assert "without the NVIDIA runtime" in check.detail and "--gpus all" in check.hint
    assert "nvidia-smi lists no GPU" in find(dataclasses.replace(facts, nvidia_smi=True), "gpu").detail
    assert "fail" not in statuses(facts).values()


def test_cuda_12_image_needs_driver_525_60_13_through_minor_version_compatibility() -> None:
    assert "minor-version compatibility" in find(dataclasses.replace(HEALTHY, gpu_count=0), "gpu").detail
    assert find(dataclasses.replace(HEALTHY, driver_version="525.60.13"), "driver").status == "ok"
    old = find(dataclasses.replace(HEALTHY, driver_version="525.60.11"), "driver")
    assert old.status == "fail" and "525.60.13" in old.hint


def test_no_framework_blocks_training() -> None:
    facts = dataclasses.replace(HEALTHY, manifest=None, packages={"pyspark": "4.3.0"})
    assert find(facts, "framework").status == "fail"


def test_format_marks_failures_loudly() -> None:
    text = format_checks(run_checks(dataclasses.replace(HEALTHY, driver_cuda="11.8")))
    assert "FAIL  cuda" in text and "-> upgrade the NVIDIA driver" in text


def test_default_route_interface(tmp_path) -> None:
    table = tmp_path / "route"
    table.write_text("Iface\tDestination\tGateway\n"
                     "docker0\t000011AC\t00000000\n"
                     "ens5\t00000000\t0100000A\n")
    assert default_route_interface(str(table)) == "ens5"
    assert default_route_interface(str(tmp_path / "missing")) is None


TENSORFLOW = {"tensorflow-cpu": "2.21.0", "keras": "3.15.1", "tf_keras": "2.21.0", "horovod": "0.28.1"}


@pytest.mark.parametrize("environ, patched, keras, horovod", [
    ({}, True, "Keras 3.15.1; TF_USE_LEGACY_KERAS=1 would give Keras 2 (tf_keras)", "ok"),
    ({"TF_USE_LEGACY_KERAS": "1"}, False, "Keras 2 (tf_keras, TF_USE_LEGACY_KERAS=1)", "ok"),
    ({}, False, "Keras 3.15.1; TF_USE_LEGACY_KERAS=1 would give Keras 2 (tf_keras)", "warn"),
])
def test_doctor_says_which_keras_tf_keras_is_and_whether_horovod_supports_it(environ, patched, keras,
                                                                              horovod) -> None:
    facts = dataclasses.replace(HEALTHY, packages=TENSORFLOW, environ=environ, horovod_keras_3=patched)
    assert find(facts, "tf.keras").detail == keras
    assert find(facts, "horovod-keras").status == horovod
    if horovod == "warn":
        assert "TF_USE_LEGACY_KERAS=1" in find(facts, "horovod-keras").hint


def test_doctor_has_no_keras_line_without_tensorflow() -> None:
    assert "tf.keras" not in statuses(HEALTHY)


def test_a_compile_cache_on_a_noexec_mount_names_the_variable_and_exec() -> None:
    facts = dataclasses.replace(HEALTHY, compile_caches=(
        ("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_trainer", "/tmp"),
        ("TRITON_CACHE_DIR", "/work/triton", None)))
    inductor, triton = [check for check in run_checks(facts) if check.name == "torch.compile"]
    assert (inductor.status, triton.status) == ("warn", "ok")
    assert inductor.detail == ("TORCHINDUCTOR_CACHE_DIR = '/tmp/torchinductor_trainer': is on /tmp, a noexec mount: "
                               "torch.compile cannot load the kernels it builds there")
    assert inductor.hint == ("set TORCHINDUCTOR_CACHE_DIR=DIR on a mount with exec, or /tmp mounted with exec, e.g. "
                             "docker run --tmpfs /tmp:exec")
    assert "fail" not in statuses(facts).values()  # training without torch.compile still runs
    without_torch = dataclasses.replace(facts, packages={"horovod": "0.28.1"})
    assert "torch.compile" not in statuses(without_torch)


def test_the_compile_caches_are_where_inductor_and_triton_put_them(tmp_path) -> None:
    environ = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TRITON_CACHE_DIR": "/work/triton"}
    triton = [("TRITON_CACHE_DIR", "/work/triton")] if importlib.util.find_spec("triton") else []
    assert compiler_caches(environ) == [("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor")), *triton]
    assert compiler_caches({}) == [("TORCHINDUCTOR_CACHE_DIR", inductor_cache_dir({}))]
    assert os.path.basename(inductor_cache_dir({})).startswith("torchinductor_")
    assert str(noexec_problem("TRITON_CACHE_DIR", "/tmp/triton-cache", "/tmp")) == (
        "TRITON_CACHE_DIR = '/tmp/triton-cache': is on /tmp, a noexec mount: torch.compile cannot load the kernels "
        "it builds there (valid: TRITON_CACHE_DIR=DIR on a mount with exec, or /tmp mounted with exec, e.g. docker "
        "run --tmpfs /tmp:exec)")


def test_a_cache_on_a_mount_with_exec_is_fine(tmp_path) -> None:
    # A real noexec mount (docker's --tmpfs /tmp): tests/image/test_compile.py.
    if os.statvfs(tmp_path).f_flag & os.ST_NOEXEC:
        pytest.skip("this host's temp dir is mounted noexec")
    assert noexec_mount(str(tmp_path / "not" / "made" / "yet")) is None
    assert list(noexec_problems({"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})) == []


SECCOMP = cma.explain(errno.EPERM, None, lambda: True)


@pytest.mark.parametrize("single_copy, refused, status, text", [
    (("cma", "environment"), None, "ok", "btl_vader_single_copy_mechanism cma (environment): ranks on one host copy "
                                         "a large message once"),
    (("none", "file (/etc/openmpi/openmpi-mca-params.conf:72)"), None, "warn", f"export {cma.MCA_VARIABLE}=cma"),
    (("cma", "default"), SECCOMP, "warn", "prints 'Read -1, expected N, errno = 1' for every large message"),
    (("none", "environment"), SECCOMP, "ok", f"copy through shared memory, since {SECCOMP}"),
])
def test_doctor_says_whether_open_mpi_copies_once_between_ranks_of_a_host(single_copy, refused, status, text) -> None:
    check = find(dataclasses.replace(HEALTHY, single_copy=single_copy, cma_refused=refused), "mpi-cma")
    assert check.status == status and text in check.detail + check.hint


def test_doctor_has_no_single_copy_line_without_open_mpi() -> None:
    assert "mpi-cma" not in statuses(HEALTHY)


WITH_RAY = dataclasses.replace(HEALTHY, packages={**HEALTHY.packages, "ray": "2.60.0"})


@pytest.mark.parametrize("changes,name,status,text", [
    ({"environ": {"PATH": "/nowhere"}}, "ray-cli", "warn", "Ray on Spark's executors run `ray start` from PATH"),
    ({"environ": {"RAY_AUTH_MODE": "disabled"}}, "ray-auth", "warn", "CVE-2023-48022"),
    ({"ray_token_file": True}, "ray-auth", "warn", "InvalidAuthToken"),
    ({"ray_token_file": True, "environ": {"RAY_ON_SPARK_START_HOOK": "trainrun.x.Hook"}}, "ray-auth", "ok",
     "start hook"),
    ({"environ": {"RAY_AUTH_MODE": "token"}}, "ray-auth", "ok", "token authentication"),
])
def test_ray_rules(changes, name, status, text) -> None:
    check = find(dataclasses.replace(WITH_RAY, **changes), name)
    assert (check.status, text in check.detail + check.hint) == (status, True), check


def test_doctor_has_no_ray_lines_without_ray() -> None:
    assert not [name for name in statuses(HEALTHY) if name.startswith("ray")]
