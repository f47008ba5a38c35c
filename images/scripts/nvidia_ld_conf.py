"""Runs inside the image at build time: writes a loader config naming the NVIDIA wheels' library folders.

The frameworks find their CUDA libraries through their own RPATHs; a library built against them,
such as Horovod's extensions (NEEDED libcudart.so.N, libnccl.so.2), finds them through this file
and `ldconfig`, so it loads the very same files and no second copy is needed.
"""
from __future__ import annotations

import argparse
import sysconfig
from pathlib import Path


def nvidia_library_dirs(site_packages: Path) -> list[Path]:
    """Every folder under site-packages/nvidia that holds a shared library."""
    return sorted({library.parent for library in (site_packages / "nvidia").glob("**/lib*.so*") if library.is_file()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("conf", type=Path, help="the file to write, e.g. /etc/ld.so.conf.d/nvidia-wheels.conf")
    args = parser.parse_args()
    directories = nvidia_library_dirs(Path(sysconfig.get_paths()["platlib"]))
    if not directories:
        raise SystemExit("nvidia_ld_conf: no NVIDIA wheel holds a shared library in this environment")
    args.conf.write_text("".join(f"{directory}\n" for directory in directories))
    print(f"{args.conf}: {len(directories)} folders")


if __name__ == "__main__":
    main()
