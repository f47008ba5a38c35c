"""torch.compile in the image, run and compared with eager mode: a function and a model as the image's user with a
read-only home, and a compiled model trained under each launcher (trainrun torch, trainrun mpi, TorchDistributor).

In a GPU flavor (the session's image, or TRAINSTACK_TEST_GPU_IMAGE) without a GPU: Inductor on CPU, and the C
compile with which Triton builds its kernel launchers, run on a trivial source against the image's Python headers.
"""
from __future__ import annotations

import json
import os

import pytest

from trainrun.image_contract import TRITON_CACHE_DIR

# The root filesystem read-only, /tmp a fresh tmpfs (as Kubernetes' readOnlyRootFilesystem with an emptyDir): the
# user's home cannot be written. exec, since Inductor and Triton load the modules they compile from /tmp.
READ_ONLY_HOME = {"read_only": True, "tmpfs": {"/tmp": "exec,size=1g"}}
HOME_IS_READ_ONLY = '! touch "$HOME/.probe" 2>/dev/null || { echo "the home directory is writable"; exit 3; }'
# Two cores run two ranks (and a JVM): one thread per rank, and test JVMs that start fast.
JOB_ENV = {"OMP_NUM_THREADS": "1", "JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
RANKS = range(2)


def last_json(output: str) -> dict:
    return json.loads(next(line for line in reversed(output.splitlines()) if line.startswith("{")))


def compile_as_user_with_read_only_home(runner) -> dict:
    output = runner.run(["bash", "-c", f"{HOME_IS_READ_ONLY}; python /units/compile_vs_eager.py"],
                        options=READ_ONLY_HOME, timeout=600)
    return last_json(output)


def test_compiled_function_and_model_match_eager_as_the_user_with_a_read_only_home(in_image):
    result = compile_as_user_with_read_only_home(in_image)
    assert result["compiled_matches_eager"] is True
    assert result["inductor_cache"].startswith("/tmp/"), result
    assert result["shared_objects"] > 0, result


def test_ddp_compiled_step_matches_eager_under_trainrun_torch(in_image):
    output = in_image.run(["trainrun", "torch", "--timeout", "540", "--nproc-per-node", "2", "--",
                           "/units/ddp_compile_step.py"], env=JOB_ENV, timeout=600)
    for rank in RANKS:
        assert f"ddp rank {rank}/2: compiled step matches eager" in output, output[-3000:]


@pytest.mark.long  # half a minute; the DDP and the user's compiled steps stay in CI
def test_horovod_compiled_step_matches_eager_under_trainrun_mpi(in_image):
    output = in_image.run(["trainrun", "mpi", "--timeout", "540", "-np", "2", "--", "python",
                           "/units/hvd_compile_step.py"], env=JOB_ENV, timeout=600)
    for rank in RANKS:
        assert f"horovod rank {rank}/2: compiled step matches eager" in output, output[-3000:]


@pytest.mark.long  # about a minute; the compiled steps under trainrun torch, trainrun mpi and a user stay in CI
def test_torch_distributor_compiled_step_matches_eager(in_image):
    output = in_image.run(["python", "/units/distributor_compile_step.py"], env=JOB_ENV, timeout=600)
    assert "distributor rank 0/2: compiled step matches eager" in output, output[-3000:]


@pytest.fixture(scope="module")
def in_gpu_flavor(runner_for, built_image, image, image_flavor):
    """A runner of TRAINSTACK_TEST_GPU_IMAGE, or of the session's image where its flavor is a GPU one."""
    gpu_image = os.environ.get("TRAINSTACK_TEST_GPU_IMAGE")
    if gpu_image:
        return runner_for(built_image(gpu_image, "invoke build --gpu").id)
    if image_flavor.gpu:
        return runner_for(image.id)
    pytest.skip(f"{image_flavor.name} is no GPU flavor and TRAINSTACK_TEST_GPU_IMAGE names no GPU image")


def test_gpu_flavor_compiles_with_inductor_on_cpu_with_a_read_only_home(in_gpu_flavor):
    result = compile_as_user_with_read_only_home(in_gpu_flavor)
    assert result["inductor_cache"].startswith("/tmp/") and result["shared_objects"] > 0, result


def test_gpu_flavor_builds_a_triton_launcher_module_with_a_read_only_home(in_gpu_flavor):
    output = in_gpu_flavor.run(["bash", "-c", f"{HOME_IS_READ_ONLY}; python /units/triton_launcher_build.py"],
                               options=READ_ONLY_HOME)
    result = last_json(output)
    assert result["add"] == 5, result
    assert result["module"].startswith(f"{TRITON_CACHE_DIR}/"), result


# docker run --read-only --tmpfs /tmp, a common hardening: docker's tmpfs is noexec unless told `:exec`.
NOEXEC_TMP = {"read_only": True, "tmpfs": {"/tmp": "size=1g"}}
COMPILE_A_FUNCTION = "import torch\nprint(torch.compile(lambda x: torch.sin(x) + 1)(torch.ones(4)))\n"
NOEXEC_LINE = ("trainstack: torch.compile: TORCHINDUCTOR_CACHE_DIR = '/tmp/torchinductor_trainer': is on /tmp, a noexec "
               "mount: torch.compile cannot load the kernels it builds there (valid: TORCHINDUCTOR_CACHE_DIR=DIR on a "
               "mount with exec, or /tmp mounted with exec, e.g. docker run --tmpfs /tmp:exec)")


def test_on_a_noexec_tmp_torch_compile_says_why_as_it_starts_and_doctor_says_it_too(in_image):
    output = in_image.run(["python", "-c", COMPILE_A_FUNCTION], expect=1, options=NOEXEC_TMP, timeout=600)
    lines = output.splitlines()
    assert NOEXEC_LINE in lines, output[-3000:]
    # Before anything of the compile's own failure, minutes later.
    assert lines.index(NOEXEC_LINE) < next(i for i, line in enumerate(lines) if "Traceback" in line), output[-3000:]
    assert "failed to map segment from shared object" in output
    doctor = in_image.run(["trainrun", "doctor"], options=NOEXEC_TMP)
    assert ("warn  torch.compile  TORCHINDUCTOR_CACHE_DIR = '/tmp/torchinductor_trainer': is on /tmp, a noexec mount"
            in doctor), doctor
    assert "-> set TORCHINDUCTOR_CACHE_DIR=DIR on a mount with exec, or /tmp mounted with exec" in doctor, doctor


def test_with_exec_on_tmp_the_hook_says_nothing(in_image):
    output = in_image.run(["python", "-c", "import sys, torch\nf = torch.compile(lambda x: x + 1)\n"
                           "print('inductor' , 'torch._inductor' in sys.modules)"], options=READ_ONLY_HOME)
    assert "inductor True" in output and "trainstack:" not in output, output
