"""Runs in the builder stage: makes the Python environment smaller before the image copies it, changing no byte
that the dynamic loader maps.

Two steps:
- Every shared library is stripped of its symbol table and debug sections (`strip --strip-unneeded`, what
  Debian's dh_strip does). A stripped copy replaces the original only when every allocated section (code,
  data, `.dynamic`, `.dynsym`, CUDA's `.nv_fatbin` kernels: all the program ever sees) has the same name,
  address, size and bytes, every segment the same type, flags, address and alignment, each PT_LOAD a
  file offset the kernel can map, and each allocated section is still mapped from the file at its address; otherwise the original stays and is named. This
  is what makes the step safe without a GPU to run the kernels on. A stripped copy must also load (dlopen
  in a fresh process) wherever the original does.
- Files matching the flavor's `prune` globs (matrix.yaml, each with its reason) are deleted, and the step
  fails if any library left in the environment names a deleted one as DT_NEEDED.

`--check` deletes nothing: it fails if a prune glob still matches (post-build verification in the image).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import struct
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
ELFCLASS64 = 2
ELFDATA2LSB = 1
ET_DYN = 3
PT_LOAD = 1
SHT_DYNAMIC = 6
SHT_NOBITS = 8
SHF_ALLOC = 0x2
DT_NEEDED = 1
PAGE_SIZE = 4096
CHUNK = 1 << 20
LOAD_PROGRAM = "import ctypes, sys; ctypes.CDLL(sys.argv[1])"


class NotSlimmable(Exception):
    """A file this script does not read: not a little-endian 64-bit ELF shared object."""


@dataclass(frozen=True)
class Segment:
    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    align: int


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int


@dataclass(frozen=True)
class ElfFile:
    """The parts of a 64-bit little-endian ELF shared object this script reads."""
    path: Path
    header: tuple[int, int, int]  # e_type, e_machine, e_entry
    segments: list[Segment]
    sections: list[Section]

    @classmethod
    def read(cls, path: Path) -> "ElfFile":
        with path.open("rb") as file:
            ident = file.read(64)
            if len(ident) < 64 or ident[:4] != ELF_MAGIC or ident[4] != ELFCLASS64 or ident[5] != ELFDATA2LSB:
                raise NotSlimmable(f"{path}: not a 64-bit little-endian ELF file")
            e_type, e_machine, _version, e_entry, phoff, shoff = struct.unpack_from("<HHIQQQ", ident, 16)
            if e_type != ET_DYN:
                raise NotSlimmable(f"{path}: not a shared object")
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", ident, 54)
            file.seek(phoff)
            raw = file.read(phentsize * phnum)
            segments = []
            for index in range(phnum):
                p_type, p_flags, offset, vaddr, _paddr, filesz, memsz, align = struct.unpack_from(
                    "<IIQQQQQQ", raw, index * phentsize)
                segments.append(Segment(p_type, p_flags, offset, vaddr, filesz, memsz, align))
            headers = []
            if shoff and shnum:
                file.seek(shoff)
                raw = file.read(shentsize * shnum)
                headers = [struct.unpack_from("<IIQQQQI", raw, index * shentsize) for index in range(shnum)]
            names = b""
            if shstrndx < len(headers):
                file.seek(headers[shstrndx][4])
                names = file.read(headers[shstrndx][5])
        sections = [Section(names[name:names.find(b"\0", name)].decode(errors="replace"), *rest)
                    for name, *rest in headers]
        return cls(path, (e_type, e_machine, e_entry), segments, sections)

    def loaded_fingerprint(self) -> tuple:
        """What the loader and the program see: the header's entry, every segment's type, flags, address and
        alignment, and each allocated section's name, address, size and bytes."""
        segments = tuple((s.type, s.flags, s.vaddr, s.align) for s in self.segments)
        allocated = []
        with self.path.open("rb") as file:
            for section in self.sections:
                if section.flags & SHF_ALLOC:
                    content = "" if section.type == SHT_NOBITS else _digest(file, section.offset, section.size)
                    allocated.append((section.name, section.type, section.flags, section.addr, section.size, content))
        return self.header, segments, tuple(sorted(allocated, key=lambda entry: entry[3]))

    def layout_problems(self) -> list[str]:
        """PT_LOADs the kernel would refuse (file offset and address not congruent modulo the page), then allocated
        sections whose bytes no PT_LOAD maps from the file at their address (or, for .bss-like sections, whose
        addresses no PT_LOAD reserves)."""
        loads = [segment for segment in self.segments if segment.type == PT_LOAD]
        problems = [f"PT_LOAD at {segment.vaddr:#x}" for segment in loads
                    if segment.offset % PAGE_SIZE != segment.vaddr % PAGE_SIZE]
        for section in self.sections:
            if not section.flags & SHF_ALLOC or section.size == 0:
                continue
            end = section.addr + section.size
            if section.type == SHT_NOBITS:
                mapped = any(s.vaddr <= section.addr and end <= s.vaddr + s.memsz for s in loads)
            else:
                mapped = any(s.vaddr <= section.addr and end <= s.vaddr + s.filesz
                             and section.offset - s.offset == section.addr - s.vaddr for s in loads)
            if not mapped:
                problems.append(section.name)
        return problems

    def needed(self) -> list[str]:
        """The DT_NEEDED names of the dynamic section."""
        dynamic = next((section for section in self.sections if section.type == SHT_DYNAMIC), None)
        if dynamic is None or dynamic.link >= len(self.sections):
            return []
        strings_section = self.sections[dynamic.link]
        with self.path.open("rb") as file:
            file.seek(dynamic.offset)
            entries = file.read(dynamic.size)
            file.seek(strings_section.offset)
            strings = file.read(strings_section.size)
        names = []
        for index in range(0, len(entries) - 15, 16):
            tag, value = struct.unpack_from("<qQ", entries, index)
            if tag == 0:
                break
            if tag == DT_NEEDED:
                names.append(strings[value:strings.index(b"\0", value)].decode())
        return names


def _digest(file, offset: int, length: int) -> str:
    digest = hashlib.sha256()
    file.seek(offset)
    while length > 0:
        block = file.read(min(CHUNK, length))
        if not block:
            break
        digest.update(block)
        length -= len(block)
    return digest.hexdigest()


def shared_libraries(root: Path) -> list[Path]:
    """Regular files under root named like shared libraries (`*.so`, `*.so.N`), symlinks excluded."""
    return sorted(path for path in root.rglob("*.so*")
                  if path.is_file() and not path.is_symlink() and (path.suffix == ".so" or ".so." in path.name))


@dataclass(frozen=True)
class StripResult:
    path: Path
    saved: int
    kept_because: str | None = None


def strip_command(source: Path, target: Path) -> list[str]:
    # --no-merge-notes: merging GNU build notes can resize a note that patchelf left inside a loaded segment.
    return ["strip", "--strip-unneeded", "--no-merge-notes", "-o", str(target), str(source)]


def strip_library(path: Path) -> StripResult:
    """Replaces path by its stripped copy when that is smaller and maps the same bytes."""
    try:
        original = ElfFile.read(path)
    except NotSlimmable:
        return StripResult(path, 0)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".stripped")
    os.close(handle)
    stripped_path = Path(temporary)
    try:
        result = subprocess.run(strip_command(path, stripped_path), capture_output=True, text=True)
        if result.returncode != 0:
            return StripResult(path, 0, f"strip failed: {result.stderr.strip()}")
        saved = path.stat().st_size - stripped_path.stat().st_size
        if saved <= 0:
            return StripResult(path, 0)
        stripped = ElfFile.read(stripped_path)
        if stripped.loaded_fingerprint() != original.loaded_fingerprint():
            return StripResult(path, 0, "stripping would change a loaded section or segment")
        if set(stripped.layout_problems()) - set(original.layout_problems()):
            return StripResult(path, 0, "stripping would misplace a loaded segment or section")
        if loads(path) and not loads(stripped_path):
            return StripResult(path, 0, "the stripped copy does not load")
        os.chmod(stripped_path, path.stat().st_mode & 0o7777)
        os.replace(stripped_path, path)
        return StripResult(path, saved)
    finally:
        stripped_path.unlink(missing_ok=True)


def loads(path: Path) -> bool:
    """Whether the dynamic loader loads path into a fresh Python process (RTLD_NOW: every symbol resolved)."""
    return subprocess.run([sys.executable, "-c", LOAD_PROGRAM, str(path)], capture_output=True).returncode == 0


def pruned_matches(root: Path, globs: list[str]) -> list[Path]:
    """Files and symlinks under root matching any glob (relative to root; `**` spans folders)."""
    return sorted({path for pattern in globs for path in root.glob(pattern) if path.is_file() or path.is_symlink()})


def dangling_needs(libraries: list[Path], removed_names: set[str]) -> list[str]:
    """'LIBRARY needs NAME' for every library that names a removed library as DT_NEEDED."""
    problems = []
    for library in libraries:
        try:
            needed = ElfFile.read(library).needed()
        except NotSlimmable:
            continue
        problems += [f"{library} needs {name}" for name in needed if name in removed_names]
    return problems


def slim(root: Path, globs: list[str], workers: int) -> int:
    removed = pruned_matches(root, globs)
    removed_bytes = sum(path.lstat().st_size for path in removed)
    for path in removed:
        path.unlink()
    problems = dangling_needs(shared_libraries(root), {path.name for path in removed})
    if problems:
        print(f"error: a pruned library is still linked: {problems[0]}"
              f"{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}; remove its glob from the matrix's prune list")
        return 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(strip_library, shared_libraries(root)))
    for result in results:
        if result.kept_because:
            print(f"kept unstripped: {result.path}: {result.kept_because}")
    stripped = [result for result in results if result.saved > 0]
    print(f"pruned {len(removed)} files ({removed_bytes / 1e6:.0f} MB); stripped {len(stripped)} of {len(results)} "
          f"shared libraries ({sum(result.saved for result in stripped) / 1e6:.0f} MB)")
    return 0


def check(root: Path, globs: list[str]) -> int:
    left = pruned_matches(root, globs)
    if left:
        print(f"error: files the matrix prunes are in the image: {', '.join(map(str, left[:5]))}")
        return 1
    print(f"no file matches the {len(globs)} prune globs")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("site_packages", type=Path)
    parser.add_argument("--prune", action="append", default=[], metavar="GLOB", help="relative to site_packages")
    parser.add_argument("--check", action="store_true", help="only fail if a prune glob matches")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    sys.exit(check(args.site_packages, args.prune) if args.check else slim(args.site_packages, args.prune, args.workers))


if __name__ == "__main__":
    main()
