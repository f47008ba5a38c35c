"""Runs in the builder stage after DeepSpeed's install: stops the build unless DeepSpeed recorded the wanted
accelerator and every op the matrix promises as installed (its setup.py skips an op it finds incompatible with a
warning only), each op's library is there, the ops built for a target without AVX-512 hold no AVX-512 instruction,
and the GPU ops hold a cubin for every wanted architecture plus PTX where the matrix asks for it.
"""
from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

ZMM_REGISTER = re.compile(r"%zmm\d+")


def names(text: str) -> list[str]:
    return [name for name in text.split(",") if name]


def architectures(entries: list[str]) -> tuple[set[int], set[int]]:
    """(cubin, PTX) compute capabilities of TORCH_CUDA_ARCH_LIST entries: "8.6" -> sm_86, "9.0+PTX" -> both."""
    cubins, ptx = set(), set()
    for entry in entries:
        capability = int(entry.removesuffix("+PTX").rstrip("a").replace(".", ""))
        cubins.add(capability)
        if entry.endswith("+PTX"):
            ptx.add(capability)
    return cubins, ptx


def missing_ops(installed_ops: dict[str, bool], ops: list[str]) -> list[str]:
    return [op for op in ops if not installed_ops.get(op)]


def op_library(site_packages: Path, op: str) -> Path | None:
    """The op's extension module, deepspeed/ops/<group>/<op>_op.*.so."""
    found = sorted((site_packages / "deepspeed" / "ops").glob(f"**/{op}_op.*.so"))
    return found[0] if found else None


def zmm_instructions(disassembly: str) -> int:
    """How many instructions of an objdump disassembly use AVX-512's zmm registers."""
    return sum(1 for line in disassembly.splitlines() if ZMM_REGISTER.search(line))


def embedded(cuobjdump: str, listing: str, library: Path) -> set[int]:
    """Architectures of the cubins (listing "elf") or PTX ("ptx") embedded in a library."""
    result = subprocess.run([cuobjdump, f"--list-{listing}", str(library)], capture_output=True, text=True)
    return {int(arch) for arch in re.findall(r"\.sm_(\d+)\.", result.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--accelerator", required=True, choices=["cpu", "cuda"])
    parser.add_argument("--ops", type=names, required=True, help="the ops promised, e.g. cpu_adam,fused_adam")
    parser.add_argument("--site-packages", type=Path, required=True)
    parser.add_argument("--no-avx512", type=names, default=[], help="ops that must hold no AVX-512 instruction")
    parser.add_argument("--cuobjdump")
    parser.add_argument("--cuda-ops", type=names, default=[], help="ops that must hold GPU kernels")
    parser.add_argument("--cuda-architectures", type=names, default=[], help="TORCH_CUDA_ARCH_LIST entries")
    args = parser.parse_args()

    from deepspeed.git_version_info import accelerator_name, installed_ops

    problems = []
    if accelerator_name != args.accelerator:
        problems.append(f"DeepSpeed was built for accelerator {accelerator_name!r}, not {args.accelerator!r}")
    problems += [f"op {op} is not installed (DeepSpeed's setup.py skipped it: see the build log's warnings)"
                 for op in missing_ops(installed_ops, args.ops)]
    libraries = {}
    for op in args.ops:
        libraries[op] = op_library(args.site_packages, op)
        if libraries[op] is None:
            problems.append(f"op {op} has no library deepspeed/ops/*/{op}_op.*.so")
    for op in args.no_avx512:
        if libraries.get(op):
            disassembly = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(libraries[op])],
                                         capture_output=True, text=True, check=True).stdout
            count = zmm_instructions(disassembly)
            print(f"{op}: {count} AVX-512 instructions")
            if count:
                problems.append(f"op {op} holds {count} AVX-512 instructions; its target has none (DS_CPU_MARCH)")
    cubins_wanted, ptx_wanted = architectures(args.cuda_architectures)
    for op in args.cuda_ops:
        if libraries.get(op):
            cubins = embedded(args.cuobjdump, "elf", libraries[op])
            ptx = embedded(args.cuobjdump, "ptx", libraries[op])
            print(f"{op}: cubins sm_{', sm_'.join(map(str, sorted(cubins)))}; "
                  f"PTX compute_{', compute_'.join(map(str, sorted(ptx)))}")
            if cubins_wanted - cubins:
                problems.append(f"op {op} has no cubin for sm_{', sm_'.join(map(str, sorted(cubins_wanted - cubins)))}")
            if ptx_wanted - ptx:
                problems.append(f"op {op} has no PTX for compute_{', compute_'.join(map(str, sorted(ptx_wanted - ptx)))}")
    print(f"DeepSpeed ops installed for {accelerator_name}: "
          + ", ".join(op for op, installed in sorted(installed_ops.items()) if installed))
    if problems:
        raise SystemExit("error: DeepSpeed's prebuilt ops are incomplete: " + "; ".join(problems))


if __name__ == "__main__":
    main()
