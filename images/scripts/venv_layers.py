"""Splits the builder's venv into one folder per image layer, each a set of distributions, for COPY --from.

    venv_layers.py VENV SITE_PACKAGES OUT REPORT --mtime SECONDS [--report-root DIR]
                   --layer NAME=PATTERN[,PATTERN...] [--layer ...]

Each file of VENV goes to OUT/NAME/<its absolute path> for the first layer one of whose patterns (fnmatch, on
canonical distribution names: lower case, runs of -_. as one -) names the distribution whose RECORD lists it; the
one layer whose pattern is `*` takes every other distribution, the files no RECORD lists, and empty folders. The image copies each folder as a
layer of its own, so a pull after a change re-sends the changed layer and those above it, not the whole venv.

The layers are made reproducible: every pyc is compiled here, as a checked-hash pyc (a timestamp pyc records its
source's install time, so two builds differ, and would go stale once the mtimes below change): the one of each .py
file a RECORD lists, which pip would have written (the builder's pip writes none: they were compiled twice), and
each one the build wrote otherwise; then every file, link and folder gets the same mtime (SECONDS) and root's
ownership. A pyc goes to the layer of its source. REPORT gets each layer's distributions, files and
bytes; where it lies under a --report-root, a folder the image copies into / as it is, that folder is made the same way.
"""
from __future__ import annotations

import argparse
import csv
import fnmatch
import importlib.util
import json
import os
import py_compile
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

CATCH_ALL = "*"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_layer(text: str) -> tuple[str, list[str]]:
    name, separator, patterns = text.partition("=")
    if not separator or not name or not patterns:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=PATTERN[,PATTERN...]")
    return name, patterns.split(",")


def record_owners(site_packages: Path) -> dict[str, str]:
    """{absolute path: canonical distribution name} from every RECORD; the first distribution by name wins."""
    owners: dict[str, str] = {}
    for dist_info in sorted(site_packages.glob("*.dist-info")):
        record = dist_info / "RECORD"
        if not record.is_file():
            continue
        distribution = canonical(dist_info.name[: -len(".dist-info")].split("-")[0])
        with record.open(newline="") as rows:
            for row in csv.reader(rows):
                if row:
                    owners.setdefault(os.path.normpath(site_packages / row[0]), distribution)
    return owners


def owner_of(path: str, owners: dict[str, str]) -> str | None:
    """The distribution whose RECORD lists the file, or, for a pyc it does not list, its source."""
    if path in owners or os.path.basename(os.path.dirname(path)) != "__pycache__":
        return owners.get(path)
    folder, name = os.path.split(os.path.dirname(path))[0], os.path.basename(path)
    return owners.get(os.path.join(folder, name.partition(".")[0] + ".py"))


def catch_all(layers: list[tuple[str, list[str]]]) -> str:
    return next(name for name, patterns in layers if patterns == [CATCH_ALL])


def layer_of(distribution: str | None, layers: list[tuple[str, list[str]]]) -> str:
    if distribution is not None:
        for name, patterns in layers:
            if patterns != [CATCH_ALL] and any(fnmatch.fnmatchcase(distribution, pattern) for pattern in patterns):
                return name
    return catch_all(layers)


def _compile(pyc: str) -> str | None:
    """Compiles a pyc's source (beside its __pycache__) as a checked-hash pyc; the pyc's path if that failed."""
    path = Path(pyc)
    stem, _, rest = path.name.partition(".")
    source = path.parent.parent / f"{stem}.py"
    optimize = int(rest.split(".opt-")[1][0]) if ".opt-" in rest else -1
    try:
        py_compile.compile(str(source), cfile=pyc, doraise=True, optimize=optimize,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    except py_compile.PyCompileError:
        return pyc
    return None


def compile_pycs(venv: Path, owners: dict[str, str]) -> list[str]:
    """Every pyc the venv has with its source beside it compiled again, and the pyc of every .py file `owners` lists
    written, as pip's install would have (its own compile skips sources that do not compile, as this does); the
    existing pycs that failed."""
    tag = sys.implementation.cache_tag
    existing = {str(pyc) for pyc in venv.rglob(f"__pycache__/*.{tag}*.pyc")
                if (pyc.parent.parent / f"{pyc.name.partition('.')[0]}.py").is_file()}
    listed = {importlib.util.cache_from_source(path) for path in owners
              if path.endswith(".py") and os.path.isfile(path)}
    with ProcessPoolExecutor() as pool:
        failed = [pyc for pyc in pool.map(_compile, sorted(existing | listed), chunksize=256) if pyc]
    return [pyc for pyc in failed if pyc in existing]


def split(venv: Path, owners: dict[str, str], out: Path, layers: list[tuple[str, list[str]]]) -> dict[str, dict]:
    """Moves VENV's files into OUT/<layer>/ by their owners (record_owners); returns each layer's distributions, files
    and bytes."""
    for name, _ in layers:
        (out / name).mkdir(parents=True, exist_ok=True)
    report = {name: {"patterns": patterns, "distributions": set(), "files": 0, "bytes": 0}
              for name, patterns in layers}
    for distribution in set(owners.values()):
        report[layer_of(distribution, layers)]["distributions"].add(distribution)
    for folder, dirs, files in os.walk(venv):
        if not dirs and not files:
            (out / catch_all(layers) / folder.lstrip("/")).mkdir(parents=True, exist_ok=True)
        for name in sorted(files) + sorted(d for d in dirs if os.path.islink(os.path.join(folder, d))):
            path = os.path.join(folder, name)
            layer = layer_of(owner_of(path, owners), layers)
            target = out / layer / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            report[layer]["files"] += 1
            report[layer]["bytes"] += os.lstat(path).st_size
            os.rename(path, target)
    return {name: {**entry, "distributions": sorted(entry["distributions"])} for name, entry in report.items()}


def normalize(out: Path, mtime: int) -> None:
    """One mtime and root's ownership for every file, link and folder under OUT (folders last)."""
    for folder, dirs, files in os.walk(out, topdown=False):
        for name in [*files, *dirs]:
            path = os.path.join(folder, name)
            os.lchown(path, 0, 0)
            os.utime(path, (mtime, mtime), follow_symlinks=False)
        os.utime(folder, (mtime, mtime))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("venv", type=Path)
    parser.add_argument("site_packages", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("report", type=Path)
    parser.add_argument("--mtime", type=int, required=True)
    parser.add_argument("--report-root", type=Path)
    parser.add_argument("--layer", type=parse_layer, action="append", required=True, dest="layers")
    args = parser.parse_args()
    if [patterns for _, patterns in args.layers].count([CATCH_ALL]) != 1:
        parser.error(f"exactly one --layer takes what no other does: NAME={CATCH_ALL}")
    owners = record_owners(args.site_packages)
    for pyc in compile_pycs(args.venv, owners):
        print(f"venv layers: {pyc}: its source does not compile; left as it was", file=sys.stderr)
    report = split(args.venv, owners, args.out, args.layers)
    normalize(args.out, args.mtime)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(report, indent=2) + "\n")
    if args.report_root:
        normalize(args.report_root, args.mtime)
    for name, entry in report.items():
        print(f"venv layer {name}: {entry['bytes'] / 1e6:.1f} MB, {entry['files']} files, "
              f"{len(entry['distributions'])} distributions")


if __name__ == "__main__":
    main()
