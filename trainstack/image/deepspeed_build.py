"""How the builder stage installs DeepSpeed from its sdist: patched, built against the image's torch, with the ops the
flavor's matrix `deepspeed.prebuilt_ops` lists compiled there (GPU ops with the builder's nvcc), and checked."""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from trainstack.image.cuda_build import BUILD_SCRIPTS_DIR, cuda_build
from trainstack.image.matrix import Flavor

# Each op's switch in DeepSpeed's setup.py (the op builders' BUILD_VAR), by the name ds_report gives the op.
OP_BUILD_VARS = {
    "cpu_adam": "DS_BUILD_CPU_ADAM",
    "cpu_adagrad": "DS_BUILD_CPU_ADAGRAD",
    "cpu_lion": "DS_BUILD_CPU_LION",
    "fused_adam": "DS_BUILD_FUSED_ADAM",
    "fused_lamb": "DS_BUILD_FUSED_LAMB",
    "fused_lion": "DS_BUILD_FUSED_LION",
    "deepspeed_shm_comm": "DS_BUILD_SHM_COMM",
    "quantizer": "DS_BUILD_QUANTIZER",
    "fp_quantizer": "DS_BUILD_FP_QUANTIZER",
    "transformer_inference": "DS_BUILD_TRANSFORMER_INFERENCE",
    "inference_core_ops": "DS_BUILD_INFERENCE_CORE_OPS",
    "transformer": "DS_BUILD_TRANSFORMER",
    "stochastic_transformer": "DS_BUILD_STOCHASTIC_TRANSFORMER",
    "random_ltd": "DS_BUILD_RANDOM_LTD",
    "spatial_inference": "DS_BUILD_SPATIAL_INFERENCE",
}
# Ops of the CUDA accelerator that hold GPU kernels (cuobjdump checks their architectures); the others are C++.
CUDA_KERNEL_OPS = frozenset(OP_BUILD_VARS) - {"cpu_adam", "cpu_adagrad", "cpu_lion", "deepspeed_shm_comm"}
# Built with run-time dispatch of its own (AVX-512 kernels behind __builtin_cpu_supports), not with cpu_march.
RUNTIME_DISPATCH_OPS = frozenset({"deepspeed_shm_comm"})
# Where the builder unpacks the sdist, and the constraints file of everything installed before DeepSpeed.
BUILD_DIR = "/tmp/build/deepspeed"
CONSTRAINTS = "/tmp/build/deepspeed-constraints.txt"
CHECK_SCRIPT = "check_deepspeed_ops.py"
# A setuptools config (DIST_EXTRA_CONFIG) that builds the ops as parallel build_ext jobs, one a core: DeepSpeed
# turns ninja off for prebuilt ops, so otherwise every op compiles after the other on one core. CPU flavors only: in
# GPU flavors torch's BuildExtension swaps the compiler to nvcc for each .cu file on the one compiler object, which a
# parallel job compiling C++ at that moment would pick up.
PARALLEL_CONFIG = "/tmp/build/deepspeed-build-ext.cfg"


@dataclass(frozen=True)
class DeepSpeedBuild:
    version: str
    # Variables of the `pip install` that builds DeepSpeed: accelerator, ops, CPU target, CUDA architectures.
    env: dict[str, str]
    # The shell line (quoted) that stops the build unless every promised op is installed and portable.
    check_command: str
    # PARALLEL_CONFIG where the ops may build in parallel, else None.
    parallel_config: str | None = None

    @property
    def source_dir(self) -> str:
        return f"{BUILD_DIR}/deepspeed-{self.version}"


def accelerator(flavor: Flavor) -> str:
    """DeepSpeed's accelerator for the flavor: the builder has no GPU, so a GPU flavor names cuda itself."""
    return "cuda" if flavor.gpu else "cpu"


def cuda_arch_list(flavor: Flavor) -> str | None:
    """TORCH_CUDA_ARCH_LIST for DeepSpeed's GPU ops (rule deepspeed-gpu-architectures)."""
    architectures = flavor.field("deepspeed", "cuda_architectures")
    return ";".join(architectures) if architectures else None


def deepspeed_build(flavor: Flavor) -> DeepSpeedBuild | None:
    if "deepspeed" not in flavor.components:
        return None
    ops = list(flavor.field("deepspeed", "prebuilt_ops") or [])
    # PYTHONHASHSEED: DeepSpeed's setup.py lists its `all` extra from a set, so its METADATA and RECORD, and the
    # image's horovod-deepspeed layer, came out in another order in each build.
    # DS_DEBUG_INFO=0 (deepspeed-0.19.8-debug-info-option.patch): the ops are stripped right after, so g++ does not
    # generate their debug info; the same stripped ops in less time.
    env = {"DS_ACCELERATOR": accelerator(flavor), "DS_BUILD_OPS": "0", "PYTHONHASHSEED": "0", "DS_DEBUG_INFO": "0"}
    env.update({OP_BUILD_VARS[op]: "1" for op in ops})
    if flavor.field("deepspeed", "cpu_march"):
        env["DS_CPU_MARCH"] = str(flavor.field("deepspeed", "cpu_march"))
    if flavor.field("deepspeed", "cpu_simd_width"):
        env["DS_CPU_SIMD_WIDTH"] = str(flavor.field("deepspeed", "cpu_simd_width"))
    build = cuda_build(flavor)
    if build:
        env["CUDA_HOME"] = build.home
    if cuda_arch_list(flavor):
        env["TORCH_CUDA_ARCH_LIST"] = cuda_arch_list(flavor)
    return DeepSpeedBuild(version=str(flavor.version("deepspeed")), env=env, check_command=_check_command(flavor, ops),
                          parallel_config=None if build else PARALLEL_CONFIG)


def _check_command(flavor: Flavor, ops: list[str]) -> str:
    command = ["python", f"{BUILD_SCRIPTS_DIR}/{CHECK_SCRIPT}", "--accelerator", accelerator(flavor),
               "--ops", ",".join(ops), "--site-packages", flavor.site_packages]
    if flavor.field("deepspeed", "cpu_simd_width") not in (None, "AVX512"):
        # The target has no AVX-512: none of the ops built for it may hold an instruction on zmm registers.
        command += ["--no-avx512", ",".join(op for op in ops if op not in RUNTIME_DISPATCH_OPS)]
    build = cuda_build(flavor)
    kernel_ops = [op for op in ops if op in CUDA_KERNEL_OPS]
    if build and kernel_ops:
        command += ["--cuobjdump", f"{build.home}/bin/cuobjdump", "--cuda-ops", ",".join(kernel_ops),
                    "--cuda-architectures", ",".join(flavor.field("deepspeed", "cuda_architectures") or [])]
    return shlex.join(command)
