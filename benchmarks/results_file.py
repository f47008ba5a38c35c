"""Where a benchmark writes its results: a scratch file (under the system's temporary folder, printed by the
benchmark) unless `--update-results` asks for the committed one in benchmarks/results/, from which pages and tables
are generated (`invoke docs`); `--out FILE` writes anywhere else. Running a benchmark as a page shows it never
overwrites what is committed."""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SCRATCH_DIR = Path(tempfile.gettempdir()) / "trainstack-benchmarks"


def add_options(parser: argparse.ArgumentParser, name: str) -> None:
    """--out FILE and --update-results, which exclude each other."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, help=f"the results file (default: {SCRATCH_DIR / name})")
    where.add_argument("--update-results", action="store_true",
                       help=f"write the committed results, benchmarks/results/{name}")


def chosen(args: argparse.Namespace, name: str) -> Path:
    """The file the results go to, its folder made."""
    path = RESULTS_DIR / name if args.update_results else Path(args.out or SCRATCH_DIR / name)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
