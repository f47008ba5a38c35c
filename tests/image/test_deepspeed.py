"""DeepSpeed in the image: `ds_report` shows it installed with the ops the flavor's matrix promises as prebuilt, the
prebuilt CPU ops hold no instruction beyond their portable target, and ZeRO-Offload's CPU optimizers run from them
as the image's user with a read-only home, nothing JIT-built. In gpu-cu13, where the matrix lists DeepSpeed as
absent, `import deepspeed` says why.

In a GPU flavor without a GPU, DeepSpeed would pick its CPU accelerator (and JIT-build its CPU ops): the tests set
DS_ACCELERATOR=cuda, the accelerator the flavor's ops were built for.
"""
from __future__ import annotations

import json
import re
import shlex

import pytest

from trainrun.image_contract import IMAGE_SCRIPTS_DIR
from trainstack.image.deepspeed_build import CHECK_SCRIPT, accelerator, deepspeed_build

# The root filesystem read-only, /tmp a fresh tmpfs: the user's home cannot be written (as in test_compile.py).
READ_ONLY_HOME = {"read_only": True, "tmpfs": {"/tmp": "exec,size=1g"}}
HOME_IS_READ_ONLY = '! touch "$HOME/.probe" 2>/dev/null || { echo "the home directory is writable"; exit 3; }'
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
# ds_report's op table: "cpu_adam ..... [YES] ...... [OKAY]".
OP_ROW = re.compile(r"^(\w+) \.+ \[(YES|NO)\] \.+ \[(OKAY|NO)\]$", re.MULTILINE)


def last_json(output: str) -> dict:
    return json.loads(next(line for line in reversed(output.splitlines()) if line.startswith("{")))


@pytest.fixture(scope="module")
def flavor(image_flavor):
    if "deepspeed" not in image_flavor.components:
        pytest.skip(f"the matrix leaves DeepSpeed out of {image_flavor.name}")
    return image_flavor


@pytest.fixture(scope="module")
def ds_env(flavor) -> dict[str, str]:
    """cpu: DeepSpeed's own detection, as users get it; a GPU flavor without a GPU: the accelerator its ops were built
    for."""
    return {"DS_ACCELERATOR": accelerator(flavor)} if flavor.gpu else {}


@pytest.fixture(scope="module")
def ds_report(in_image, ds_env) -> str:
    return ANSI_COLOUR.sub("", in_image.run(["ds_report"], env=ds_env))


def test_ds_report_shows_deepspeed_installed_for_the_flavors_accelerator(ds_report, flavor):
    assert re.search(rf"^deepspeed info \.+ {re.escape(flavor.version('deepspeed'))},", ds_report, re.MULTILINE), ds_report
    # ds_report names no accelerator; the CUDA one reports torch's CUDA and nvcc, and only the CPU one has the
    # shared-memory and oneCCL communication ops.
    assert bool(re.search(r"^torch cuda version \.+", ds_report, re.MULTILINE)) == flavor.gpu, ds_report
    assert bool(re.search(r"^deepspeed_shm_comm \.+", ds_report, re.MULTILINE)) == (not flavor.gpu), ds_report
    assert re.search(r"^torch version \.+ " + re.escape(flavor.version("torch")), ds_report, re.MULTILINE), ds_report
    assert re.search(r"^ninja \.+ \[OKAY\]", ds_report, re.MULTILINE), ds_report


def test_ds_report_shows_every_op_the_matrix_promises_installed(ds_report, flavor):
    rows = {name: (installed, compatible) for name, installed, compatible in OP_ROW.findall(ds_report)}
    promised = flavor.field("deepspeed", "prebuilt_ops")
    assert {op: rows.get(op, ("missing", ""))[0] for op in promised} == dict.fromkeys(promised, "YES"), ds_report
    if not flavor.gpu:
        # The image's g++ and ninja could rebuild each of them: ds_report calls them compatible.
        assert {op: rows[op][1] for op in promised} == dict.fromkeys(promised, "OKAY"), ds_report


def test_prebuilt_ops_pass_the_builders_check_in_the_image(in_image, flavor, ds_env):
    # The check the builder ran (images/scripts/check_deepspeed_ops.py, also in the image's scripts): every op
    # installed, and none of the CPU ops holding an AVX-512 instruction. The GPU kernels' architectures are checked
    # in the builder only: the image holds no cuobjdump.
    command = shlex.split(deepspeed_build(flavor).check_command)
    command[1] = f"{IMAGE_SCRIPTS_DIR}/{CHECK_SCRIPT}"
    if "--cuobjdump" in command:
        command = command[:command.index("--cuobjdump")]
    output = in_image.run(command, env=ds_env)
    for op in flavor.field("deepspeed", "prebuilt_ops"):
        assert op in output.splitlines()[-1], output


def test_cpu_optimizers_step_from_the_prebuilt_ops_as_the_user_with_a_read_only_home(in_image, flavor, ds_env):
    output = in_image.run(["bash", "-c", f"{HOME_IS_READ_ONLY}; python /units/deepspeed_cpu_optimizers.py"],
                          env=ds_env, options=READ_ONLY_HOME, timeout=600)
    result = last_json(output)
    assert result["accelerator"] == accelerator(flavor)
    for op in ("cpu_adam", "cpu_adagrad"):
        assert "/site-packages/deepspeed/ops/" in result[op]["op_file"], result
        assert result[op]["moved"] > 1e-3 and result[op]["max_difference"] < 1e-5, result
    assert result["jit_built"] == [], result


def test_zero_offload_trains_as_the_user_with_a_read_only_home(in_image, ds_env, flavor):
    if flavor.gpu:
        pytest.skip("ZeRO on the CUDA accelerator needs a GPU")
    output = in_image.run(["bash", "-c", f"{HOME_IS_READ_ONLY}; python /units/deepspeed_zero_offload.py"],
                          env={**ds_env, "OMP_NUM_THREADS": "1"}, options=READ_ONLY_HOME, timeout=600)
    result = last_json(output)
    assert result["optimizer"] == "DeepSpeedCPUAdam", result
    assert result["losses"][-1] < 0.8 * result["losses"][0], result
    assert result["jit_built"] == [], result


def test_deepspeed_absent_from_a_flavor_says_why(in_image, image_flavor):
    absent = next((entry for entry in image_flavor.absent if entry["package"] == "deepspeed"), None)
    if absent is None:
        pytest.skip(f"{image_flavor.name} holds DeepSpeed")
    output = in_image.run(["python", "-c", "import deepspeed"], expect=1)
    assert f"No module named 'deepspeed': the trainstack {image_flavor.name} image has none." in output, output
    assert absent["reason"] in output
