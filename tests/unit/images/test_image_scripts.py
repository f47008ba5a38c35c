"""The pure parts of images/scripts, which run inside the image at build time."""
import os
import subprocess
from pathlib import Path

import pytest
from file_modules import load_file_module

from trainstack.image.matrix import REPO_ROOT

SCRIPTS = REPO_ROOT / "images" / "scripts"
NCCL = "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"
CUDART = "/opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcudart.so.13"
CUDNN = "/opt/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9"
CUDNN_OPS = "/opt/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn_ops.so.9"


def load_script(name: str):
    return load_file_module(SCRIPTS / f"{name}.py")


@pytest.fixture(scope="module")
def write_manifest():
    return load_script("write_manifest")


def touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")


def test_ld_conf_names_every_nvidia_folder_with_a_shared_library(tmp_path):
    for library in ("nvidia/cu13/lib/libcudart.so.13", "nvidia/nccl/lib/libnccl.so.2", "nvidia/cudnn/lib/libcudnn.so.9"):
        touch(tmp_path / library)
    touch(tmp_path / "nvidia/nccl/include/nccl.h")
    touch(tmp_path / "torch/lib/libtorch.so")
    assert load_script("nvidia_ld_conf").nvidia_library_dirs(tmp_path) == [
        tmp_path / "nvidia/cu13/lib", tmp_path / "nvidia/cudnn/lib", tmp_path / "nvidia/nccl/lib",
    ]


def test_cuda_library_files_finds_every_copy(write_manifest, tmp_path):
    for library in ("venv/nvidia/nccl/lib/libnccl.so.2", "cuda-build/nccl/libnccl.so",
                    "venv/nvidia/cu13/lib/libcudart.so.13", "usr/local/cuda/lib64/libcudart.so.13",
                    "usr/lib/libcurl.so.4"):
        touch(tmp_path / library)
    found = write_manifest.cuda_library_files(tmp_path)
    assert found == {
        "libcudart.so.13": [str(tmp_path / "usr/local/cuda/lib64/libcudart.so.13"),
                            str(tmp_path / "venv/nvidia/cu13/lib/libcudart.so.13")],
        "libnccl.so": [str(tmp_path / "cuda-build/nccl/libnccl.so")],
        "libnccl.so.2": [str(tmp_path / "venv/nvidia/nccl/lib/libnccl.so.2")],
    }


def test_links_to_one_library_file_are_one_copy(write_manifest, tmp_path):
    wheel = tmp_path / "venv/nvidia/cu13/lib/libcupti.so.13"
    touch(wheel)
    for folder in ("cupti", "cupti-blackwell"):  # Triton's profiler folders, each a link to the wheel's CUPTI
        (tmp_path / "venv/triton" / folder).mkdir(parents=True)
        (tmp_path / "venv/triton" / folder / "libcupti.so").symlink_to(wheel)
    touch(tmp_path / "usr/local/cuda/lib64/libcupti.so.13")
    assert write_manifest.duplicate_libraries(write_manifest.cuda_library_files(tmp_path)) == {
        "libcupti.so.13": [str(tmp_path / "usr/local/cuda/lib64/libcupti.so.13"), str(wheel)]}


def test_loaded_libraries_reads_proc_maps(write_manifest):
    maps = (
        f"7f0000000000-7f0000001000 r--p 00000000 00:2a 123 {NCCL}\n"
        f"7f0000001000-7f0000002000 r-xp 00001000 00:2a 123 {NCCL}\n"
        f"7f0000003000-7f0000004000 r--p 00000000 00:2a 124 {CUDART}\n"
        f"7f0000004000-7f0000005000 r--p 00000000 00:2a 125 {CUDNN}\n"
        f"7f0000004000-7f0000005000 r--p 00000000 00:2a 126 {CUDNN_OPS}\n"
        "7f0000005000-7f0000006000 rw-p 00000000 00:00 0 \n"
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n"
    )
    assert write_manifest.loaded_libraries(maps) == {
        "libnccl": [NCCL], "libcudart": [CUDART], "libcudnn": [CUDNN], "libcublas": [],
    }


def test_horovod_links_reads_ldd(write_manifest, tmp_path, monkeypatch):
    extension = tmp_path / "horovod/torch/mpi_lib_v2.cpython-311-x86_64-linux-gnu.so"
    touch(extension)
    ldd = (
        "\tlinux-vdso.so.1 (0x00007ffc)\n"
        f"\tlibnccl.so.2 => {NCCL} (0x00007f01)\n"
        "\tlibcudart.so.13 => not found\n"
        "\tlibmpi.so.40 => /lib/x86_64-linux-gnu/libmpi.so.40 (0x00007f02)\n"
    )
    monkeypatch.setattr(write_manifest, "_command_output", lambda argv: ldd)
    monkeypatch.setattr(write_manifest.os.path, "realpath", lambda path: path)
    assert write_manifest.horovod_links(tmp_path) == {
        "horovod/torch/mpi_lib_v2.cpython-311-x86_64-linux-gnu.so": {"libnccl.so.2": NCCL, "libcudart.so.13": "not found"}
    }


@pytest.mark.parametrize(("number", "release"), [(92000, "9.20.0"), (91002, "9.10.2"), (None, None)])
def test_cudnn_release(write_manifest, number, release):
    assert write_manifest._cudnn_release(number) == release


def test_debian_toolkit_is_arranged_as_a_cuda_home(tmp_path):
    toolkit = load_script("debian_cuda_toolkit")
    unpacked = tmp_path / "unpacked"
    for path in ("usr/bin/ptxas", "usr/bin/cuobjdump", "usr/lib/nvidia-cuda-toolkit/bin/cicc",
                 "usr/lib/nvidia-cuda-toolkit/bin/crt/link.stub", "usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc",
                 "usr/include/cuda_runtime.h", "usr/include/nv/target", "usr/lib/x86_64-linux-gnu/libcudart_static.a",
                 "usr/lib/x86_64-linux-gnu/libcudadevrt.a", "usr/lib/x86_64-linux-gnu/libculibos.a",
                 "usr/lib/x86_64-linux-gnu/stubs/libcuda.so", "usr/lib/x86_64-linux-gnu/libcublas_static.a"):
        touch(unpacked / path)
    (unpacked / "usr/bin/nvcc").write_text("#!/bin/sh\n# Debian's wrapper\n")
    (unpacked / "usr/lib/nvidia-cuda-toolkit/bin/nvcc").write_text("the real nvcc")
    home = tmp_path / "cuda"
    toolkit.arrange_cuda_home(unpacked, home, "/opt/venv/nvidia/cuda_runtime/lib/libcudart.so.12")
    assert sorted(path.name for path in (home / "bin").iterdir()) == [
        "cicc", "crt", "cuobjdump", "nvcc", "nvcc.profile", "ptxas"]
    assert (home / "bin/nvcc").read_text() == "the real nvcc"
    assert "TOP = $(_HERE_)/..\n" in (home / "bin/nvcc.profile").read_text()
    assert (home / "include/nv/target").is_file() and (home / "nvvm/libdevice/libdevice.10.bc").is_file()
    assert sorted(path.name for path in (home / "lib64").iterdir()) == [
        "libcudadevrt.a", "libcudart.so", "libcudart_static.a", "libculibos.a", "stubs"]
    assert str((home / "lib64/libcudart.so").readlink()) == "/opt/venv/nvidia/cuda_runtime/lib/libcudart.so.12"


@pytest.mark.parametrize(("env", "expected"), [
    ({"JUPYTER_PORT": "abc"}, "error: JUPYTER_PORT = 'abc': is not a port number (valid: a whole number from 1 to "
                              "65535; unset for 8888)"),
    ({"JUPYTER_PORT": "0"}, "error: JUPYTER_PORT = '0': is not a port number"),
    ({"JUPYTER_PORT": "65536"}, "error: JUPYTER_PORT = '65536': is not a port number"),
    ({"JUPYTER_PORT": "8888 --ServerApp.ip=1.2.3.4"}, "error: JUPYTER_PORT = '8888 --ServerApp.ip=1.2.3.4': "),
    ({"JUPYTER_TOKEN": ""}, "error: JUPYTER_TOKEN = '': an empty or blank token lets anyone who reaches the port "
                            "run code (valid: unset, for a random token printed at start, or a token of your own)"),
    ({"JUPYTER_TOKEN": " \t"}, "error: JUPYTER_TOKEN = ' \t': an empty or blank token"),
])
def test_lab_refuses_a_bad_port_or_a_blank_token_in_one_line(env: dict, expected: str) -> None:
    """Before JupyterLab starts (the image test_lab.py starts it): one line naming the variable, exit 2."""
    finished = subprocess.run(["bash", str(SCRIPTS / "trainstack-entrypoint"), "lab"], capture_output=True,
                              text=True, env={"PATH": os.environ["PATH"], "HOME": "/nonexistent", **env}, timeout=30)
    assert (finished.returncode, finished.stdout) == (2, ""), finished
    assert finished.stderr.count("\n") == 1 and finished.stderr.startswith(expected), finished.stderr
