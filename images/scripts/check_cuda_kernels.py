"""Runs in the builder stage: stops the build unless Horovod's extensions hold its CUDA kernels for every
wanted GPU architecture (a cubin each) plus PTX for the newest, as `cuobjdump` lists them.
"""
from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path


def embedded(cuobjdump: str, listing: str, library: Path) -> set[int]:
    """Architectures of the cubins (listing "elf") or PTX ("ptx") embedded in a library."""
    result = subprocess.run([cuobjdump, f"--list-{listing}", str(library)], capture_output=True, text=True)
    return {int(arch) for arch in re.findall(r"\.sm_(\d+)\.", result.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cuobjdump", required=True)
    parser.add_argument("--architectures", type=lambda text: [int(cc) for cc in text.split(",")], required=True,
                        help="compute capabilities, e.g. 70,75,80,86,89,90 (as HOROVOD_BUILD_CUDA_CC_LIST)")
    parser.add_argument("package", type=Path, help="Horovod's package folder")
    args = parser.parse_args()
    problems, checked = [], 0
    for library in sorted(args.package.glob("*/mpi_lib*.so")):
        cubins, ptx = embedded(args.cuobjdump, "elf", library), embedded(args.cuobjdump, "ptx", library)
        print(f"{library.relative_to(args.package.parent)}: cubins sm_{', sm_'.join(map(str, sorted(cubins)))}; "
              f"PTX compute_{', compute_'.join(map(str, sorted(ptx)))}")
        checked += 1
        missing = sorted(set(args.architectures) - cubins)
        if missing:
            problems.append(f"{library.name} has no cubin for sm_{', sm_'.join(map(str, missing))}")
        if max(args.architectures) not in ptx:
            problems.append(f"{library.name} has no PTX for compute_{max(args.architectures)}")
    if not checked:
        problems.append(f"no Horovod framework extension (*/mpi_lib*.so) under {args.package}")
    if problems:
        raise SystemExit("error: Horovod's CUDA kernels are incomplete: " + "; ".join(problems))


if __name__ == "__main__":
    main()
