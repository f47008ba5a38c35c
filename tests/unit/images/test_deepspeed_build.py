"""DeepSpeed in the images: the matrix's pins and rules, the builder's install of it with its prebuilt ops, and the
pure parts of the build's check of those ops."""
import dataclasses

import pytest
from file_modules import load_file_module

from trainstack.image.cuda_build import cuda_build
from trainstack.image.deepspeed_build import OP_BUILD_VARS, deepspeed_build
from trainstack.image.dockerfile import render_dockerfile, runtime_env
from trainstack.image.matrix import REPO_ROOT, MatrixError, broken_rules, load_matrix

CPU_OPS = ["cpu_adam", "cpu_adagrad", "cpu_lion", "fused_adam", "deepspeed_shm_comm"]
GPU_OPS = ["fused_adam", "fused_lamb", "fused_lion", "cpu_adam", "cpu_adagrad", "cpu_lion"]


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def with_deepspeed(flavor, **fields):
    """The flavor with its deepspeed component's fields replaced (a field given as None is removed)."""
    entry = {**flavor.components.get("deepspeed", {"version": "0.19.8"}), **fields}
    entry = {name: value for name, value in entry.items() if value is not None}
    return dataclasses.replace(flavor, components={**flavor.components, "deepspeed": entry})


def rule_ids(flavor, matrix) -> list[str]:
    return [message.split(":")[0].removeprefix("rule ") for message in broken_rules(flavor, matrix.rules)]


def test_cpu_and_gpu_pin_deepspeed_and_promise_their_ops(matrix):
    assert matrix.flavor("cpu").version("deepspeed") == matrix.flavor("gpu").version("deepspeed") == "0.19.8"
    assert matrix.flavor("cpu").field("deepspeed", "prebuilt_ops") == CPU_OPS
    assert matrix.flavor("gpu").field("deepspeed", "prebuilt_ops") == GPU_OPS
    assert set(CPU_OPS + GPU_OPS) <= set(OP_BUILD_VARS)


def test_gpu_cu13_leaves_deepspeed_out_by_a_rule_and_says_why_on_import(matrix):
    cu13 = matrix.flavor("gpu-cu13")
    assert "deepspeed" not in cu13.components
    assert deepspeed_build(cu13) is None
    # No DeepSpeed step; the word stays only in the matrix's venv layer patterns.
    dockerfile = render_dockerfile(cu13)
    assert "deepspeed==" not in dockerfile and "DS_BUILD" not in dockerfile
    assert [line for line in dockerfile.lower().splitlines() if "deepspeed" in line] == [
        "      --layer horovod-deepspeed=horovod,deepspeed,hjson,ninja,py-cpuinfo",
        "copy --from=builder /tmp/build/venv-layers/horovod-deepspeed/ /"]
    absent = next(entry for entry in cu13.absent if entry["package"] == "deepspeed")
    assert "rule deepspeed-0.19-cuda-12" in absent["reason"]
    # With DeepSpeed added, the rule refuses the flavor, naming CUDA 13.
    assert "deepspeed-0.19-cuda-12" in rule_ids(with_deepspeed(cu13, prebuilt_ops=["fused_adam"],
                                                                 cuda_architectures=["9.0"]), matrix)
    [message] = [m for m in broken_rules(with_deepspeed(cu13), matrix.rules) if "deepspeed-0.19-cuda-12" in m]
    assert "cuda >=12,<13 (has 13.2)" in message and "DS_SKIP_CUDA_CHECK" in message


@pytest.mark.parametrize(("flavor", "fields", "rule"), [
    ("gpu", {"cuda_architectures": None}, "deepspeed-gpu-architectures"),
    ("gpu", {"patch": None}, "deepspeed-0.19-portable-cpu-ops"),
    ("cpu", {"cpu_march": None}, "deepspeed-0.19-portable-cpu-ops"),
    ("cpu", {"cpu_simd_width": None}, "deepspeed-0.19-portable-cpu-ops"),
])
def test_a_deepspeed_build_missing_what_a_rule_needs_is_refused(matrix, flavor, fields, rule):
    assert rule_ids(with_deepspeed(matrix.flavor(flavor), **fields), matrix) == [rule]


def test_deepspeed_without_prebuilt_ops_needs_no_patch(matrix):
    assert rule_ids(with_deepspeed(matrix.flavor("cpu"), prebuilt_ops=None, patch=None), matrix) == []


@pytest.mark.parametrize(("overrides", "rule"), [
    ({"deepspeed.patch": ""}, "deepspeed-0.19-portable-cpu-ops"),
    ({"torch": "1.13.1"}, "deepspeed-torch"),
])
def test_an_override_breaking_a_deepspeed_rule_is_refused_naming_it(matrix, overrides, rule):
    with pytest.raises(MatrixError, match=f"rule {rule}:"):
        matrix.flavor("cpu", overrides)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"deepspeed.prebuilt_ops": "cpu_adam,sparse_attn"},
     "--set deepspeed.prebuilt_ops.1 = 'sparse_attn': is not an allowed value (valid: cpu_adam, cpu_adagrad"),
    ({"deepspeed.cuda_architectures": "9.0;rm -rf"}, "--set deepspeed.cuda_architectures.0 = '9.0;rm -rf'"),
    ({"deepspeed.cpu_simd_width": "AVX1024"}, "--set deepspeed.cpu_simd_width = 'AVX1024': is not an allowed value"),
    ({"deepspeed.patch": "missing.patch"}, "--set deepspeed.patch.0 = 'missing.patch': is not a file in images/patches/"),
])
def test_bad_deepspeed_overrides_name_the_field(matrix, overrides, message):
    with pytest.raises(MatrixError) as error:
        matrix.flavor("gpu", overrides)
    assert message in str(error.value)


def test_cpu_builds_its_ops_for_the_cpu_accelerator_and_a_portable_target(matrix):
    build = deepspeed_build(matrix.flavor("cpu"))
    assert build.env == {"DS_ACCELERATOR": "cpu", "DS_BUILD_OPS": "0", "DS_BUILD_CPU_ADAM": "1",
                         "DS_BUILD_CPU_ADAGRAD": "1", "DS_BUILD_CPU_LION": "1", "DS_BUILD_FUSED_ADAM": "1",
                         "DS_BUILD_SHM_COMM": "1", "DS_CPU_MARCH": "x86-64-v3", "DS_CPU_SIMD_WIDTH": "AVX256",
                         "PYTHONHASHSEED": "0", "DS_DEBUG_INFO": "0"}
    # deepspeed_shm_comm dispatches to its AVX-512 kernels at run time; the others must hold none.
    assert "--no-avx512 cpu_adam,cpu_adagrad,cpu_lion,fused_adam " in build.check_command + " "
    assert "--cuobjdump" not in build.check_command


def test_gpu_builds_its_ops_with_the_builders_nvcc_for_the_matrix_architectures(matrix):
    gpu = matrix.flavor("gpu")
    build = deepspeed_build(gpu)
    assert build.env["DS_ACCELERATOR"] == "cuda"  # the builder has no GPU: auto-detection would pick cpu
    assert build.env["TORCH_CUDA_ARCH_LIST"] == "7.0;7.5;8.0;8.6;9.0+PTX"
    assert build.env["CUDA_HOME"] == cuda_build(gpu).home
    assert {name for name, value in build.env.items() if name.startswith("DS_BUILD_") and value == "1"} == {
        OP_BUILD_VARS[op] for op in GPU_OPS}
    assert ("--cuobjdump /opt/cuda-build/debian-cuda/bin/cuobjdump --cuda-ops fused_adam,fused_lamb,fused_lion "
            "--cuda-architectures 7.0,7.5,8.0,8.6,9.0+PTX") in build.check_command


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_deepspeed_is_built_in_the_builder_against_the_images_torch(matrix, name):
    dockerfile = render_dockerfile(matrix.flavor(name))
    builder, image = dockerfile.split("# --- the image ---")
    # The image gets DeepSpeed through the builder's venv, as a layer with Horovod; it names the version in a label.
    assert [line for line in image.splitlines() if "deepspeed" in line.lower()] == [
        "COPY --from=builder /tmp/build/venv-layers/horovod-deepspeed/ /", 'LABEL io.trainstack.deepspeed.version="0.19.8"']
    compile_stage = builder[builder.index("FROM frameworks AS deepspeed"):builder.index("# --- builder:")]
    assert "pip download --no-deps --no-binary :all: deepspeed==0.19.8" in compile_stage
    assert "patch -p1 < /tmp/build/patches/deepspeed-0.19.8-portable-cpu-ops.patch" in compile_stage
    # The ops are stripped right after: g++ generates no debug info for them (the option the patch adds).
    assert compile_stage.index("deepspeed-0.19.8-debug-info-option.patch") < compile_stage.index("DS_DEBUG_INFO=0 ")
    assert "pip install --no-build-isolation --no-deps --root /tmp/build/deepspeed-root ." in compile_stage
    # Its dependencies in the builder, under the constraints of everything installed there; after Horovod and the
    # libraries, before the builder drops the headers the ops compile against.
    install = builder[builder.index("COPY --from=deepspeed"):builder.index("RUN python /tmp/build/scripts/check_deepspeed")]
    assert "PIP_CONSTRAINT=/tmp/build/deepspeed-constraints.txt pip install deepspeed==0.19.8" in install
    assert builder.index("COPY --from=horovod") < builder.index(install) < builder.index("# Left in the builder")
    # CPU ops build as parallel build_ext jobs; GPU flavors' not (torch swaps the one compiler object to nvcc).
    assert ("DIST_EXTRA_CONFIG=/tmp/build/deepspeed-build-ext.cfg" in compile_stage) == (name == "cpu")
    arch_list = "TORCH_CUDA_ARCH_LIST='7.0;7.5;8.0;8.6;9.0+PTX'"
    assert (arch_list in compile_stage) == (name == "gpu")


def test_jit_built_ops_go_to_a_folder_any_user_can_write(matrix):
    assert runtime_env()["TORCH_EXTENSIONS_DIR"] == "/tmp/torch-extensions"
    assert 'ENV TORCH_EXTENSIONS_DIR="/tmp/torch-extensions"' in render_dockerfile(matrix.flavor("cpu"))


def load_check_script():
    return load_file_module(REPO_ROOT / "images/scripts/check_deepspeed_ops.py")


def test_check_reads_torch_cuda_arch_list_entries():
    assert load_check_script().architectures(["7.0", "8.6", "9.0+PTX"]) == ({70, 86, 90}, {90})


def test_check_counts_avx512_instructions_and_finds_op_libraries(tmp_path):
    check = load_check_script()
    disassembly = ("  1000:\tvmovups (%rdi),%ymm0\n  1004:\tvfmadd231ps %zmm1,%zmm2,%zmm0\n"
                   "  100a:\tvaddps %zmm3,%zmm0,%zmm0\n  1010:\tret\n")
    assert check.zmm_instructions(disassembly) == 2
    library = tmp_path / "deepspeed/ops/adam/cpu_adam_op.cpython-311-x86_64-linux-gnu.so"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"")
    assert check.op_library(tmp_path, "cpu_adam") == library
    assert check.op_library(tmp_path, "fused_adam") is None
    assert check.missing_ops({"cpu_adam": True, "fused_adam": False}, ["cpu_adam", "fused_adam", "cpu_lion"]) == [
        "fused_adam", "cpu_lion"]
