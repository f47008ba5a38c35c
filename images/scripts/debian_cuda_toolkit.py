"""Runs in the builder stage: a CUDA toolkit (nvcc, headers) from Debian packages of another suite.

Bookworm has no CUDA 12 nvcc; trixie's `non-free` does, and its binaries run on bookworm's glibc.
The packages are downloaded with apt pointed at that suite only (its own sources list and index
folders), unpacked with `dpkg -x`, never installed (they would pull the newer suite's libc), and
arranged as a conventional CUDA home (bin/, include/, lib64/, nvvm/libdevice) for CMake and Horovod.
Any failure stops the build with one line naming the package and what to set instead.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Debian puts the real nvcc and cicc here; /usr/bin/nvcc is a wrapper script.
DEBIAN_TOOLKIT_DIR = "usr/lib/nvidia-cuda-toolkit"
DEBIAN_LIBRARY_DIR = "usr/lib/x86_64-linux-gnu"
# What nvcc and CMake's CUDA checks link from lib64; the shared libcudart is the frameworks' (--cudart).
STATIC_LIBRARIES = ("libcudart_static.a", "libcudadevrt.a", "libculibos.a")
# Debian's profile is a link to /etc/nvcc.profile with absolute /usr paths; nvcc expands $(_HERE_).
NVCC_PROFILE = """\
TOP = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
PATH += $(_HERE_):
INCLUDES += "-I$(TOP)/include" $(_SPACE_)
LIBRARIES =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
"""
OTHER_SOURCES = "or build with --set cuda.build_tools=apt (NVIDIA's repository)"


class ToolkitError(Exception):
    """One line for the build log: what failed and what to set instead."""


class DebianArchive:
    """apt restricted to one suite of one mirror, with state kept under `workdir`."""

    def __init__(self, workdir: Path, mirror: str, suite: str, components: list[str], ca_bundle: Path | None):
        self.mirror, self.suite, self.workdir = mirror, suite, workdir
        sources = workdir / "sources.list"
        sources.write_text(f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {mirror} {suite} {' '.join(components)}\n")
        for folder in ("lists/partial", "cache/archives/partial", "debs"):
            (workdir / folder).mkdir(parents=True)
        self.options = [
            f"-o=Dir::Etc::sourcelist={sources}", "-o=Dir::Etc::sourceparts=-",
            f"-o=Dir::State::Lists={workdir / 'lists'}", f"-o=Dir::Cache={workdir / 'cache'}",
            "-o=APT::Sandbox::User=root",
        ]
        if ca_bundle:
            self.options.append(f"-o=Acquire::https::CAInfo={ca_bundle}")

    def update(self) -> None:
        result = self._apt("apt-get", "update")
        lines = result.stdout.splitlines()
        # apt prints "Err:1 URL" with the cause on the next, indented line.
        causes = [cause.strip() for line, cause in zip(lines, lines[1:]) if line.startswith("Err:")]
        failures = causes + [line for line in lines if line.startswith(("E:", "W:"))]
        if result.returncode != 0 or failures:
            reason = (failures or lines or ["no output"])[0]
            raise ToolkitError(f"Debian {self.suite} at {self.mirror} is unreachable from the build ({reason}); "
                               f"set cuda.debian_mirror to a reachable Debian mirror, {OTHER_SOURCES}")

    def download(self, package: str, version: str) -> Path:
        result = self._apt("apt-get", "download", f"{package}={version}", cwd=self.workdir / "debs")
        debs = list((self.workdir / "debs").glob(f"{package}_*.deb"))
        if result.returncode == 0 and debs:
            return debs[0]
        available = self.versions(package)
        if version not in available:
            has = f"it has {', '.join(available)}" if available else "the package is gone"
            raise ToolkitError(f"{package}={version} is no longer in Debian {self.suite} ({has}); pin a version it has "
                               f"in images/matrix.yaml cuda.debian_packages, {OTHER_SOURCES}")
        reason = (result.stdout.strip().splitlines() or ["no output"])[-1]
        raise ToolkitError(f"downloading {package}={version} from {self.mirror} failed ({reason}); retry, "
                           f"set cuda.debian_mirror to another Debian mirror, {OTHER_SOURCES}")

    def versions(self, package: str) -> list[str]:
        result = self._apt("apt-cache", "madison", package)
        return [line.split("|")[1].strip() for line in result.stdout.splitlines() if line.count("|") >= 2]

    def _apt(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        command = [argv[0], *self.options, *argv[1:]]
        return subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              stdin=subprocess.DEVNULL)


def arrange_cuda_home(unpacked: Path, home: Path, cudart: str) -> None:
    """Moves the unpacked toolkit into home/{bin,include,lib64,nvvm/libdevice} and writes nvcc's profile."""
    toolkit = unpacked / DEBIAN_TOOLKIT_DIR
    (home / "bin").mkdir(parents=True)
    for tool in (unpacked / "usr/bin").iterdir():
        if tool.name != "nvcc":
            shutil.move(tool, home / "bin" / tool.name)
    for name in ("nvcc", "cicc", "crt"):
        shutil.move(toolkit / "bin" / name, home / "bin" / name)
    (home / "bin" / "nvcc.profile").write_text(NVCC_PROFILE)
    shutil.move(unpacked / "usr/include", home / "include")
    (home / "nvvm").mkdir()
    shutil.move(toolkit / "libdevice", home / "nvvm" / "libdevice")
    (home / "lib64").mkdir()
    for name in (*STATIC_LIBRARIES, "stubs"):
        shutil.move(unpacked / DEBIAN_LIBRARY_DIR / name, home / "lib64" / name)
    (home / "lib64" / "libcudart.so").symlink_to(cudart)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mirror", required=True)
    parser.add_argument("--suite", required=True)
    parser.add_argument("--components", nargs="+", required=True)
    parser.add_argument("--home", type=Path, required=True, help="the CUDA home to create")
    parser.add_argument("--cudart", required=True, help="where lib64/libcudart.so points: the frameworks' libcudart")
    parser.add_argument("--ca-bundle", type=Path)
    parser.add_argument("packages", nargs="+", metavar="PACKAGE=VERSION")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="debian-cuda-") as workdir:
        try:
            archive = DebianArchive(Path(workdir), args.mirror, args.suite, args.components, args.ca_bundle)
            archive.update()
            debs = [archive.download(*requirement.split("=", 1)) for requirement in args.packages]
        except ToolkitError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(1) from None
        unpacked = Path(workdir) / "unpacked"
        for deb in debs:
            subprocess.run(["dpkg", "-x", str(deb), str(unpacked)], check=True)
        arrange_cuda_home(unpacked, args.home, args.cudart)
    print(f"{args.home}: CUDA toolkit from Debian {args.suite} ({', '.join(args.packages)})")


if __name__ == "__main__":
    main()
