"""Every .py file a distribution's RECORD lists in the image's venv has a checked-hash pyc of its bytes as they are
(patched ones included), except those that do not compile; prints a JSON summary."""
import csv
import importlib.util
import json
import os
import sysconfig
from pathlib import Path

site_packages = Path(sysconfig.get_paths()["platlib"])
sources = set()
for record in site_packages.glob("*.dist-info/RECORD"):
    with record.open(newline="") as rows:
        sources.update(os.path.normpath(site_packages / row[0]) for row in csv.reader(rows)
                       if row and row[0].endswith(".py"))
sources = sorted(path for path in sources if os.path.isfile(path))
missing, stale, timestamped, compilable_missing = [], [], [], []
for source in sources:
    pyc = Path(importlib.util.cache_from_source(source))
    if not pyc.is_file():
        missing.append(source)
        try:
            compile(Path(source).read_bytes(), source, "exec")
            compilable_missing.append(source)
        except SyntaxError:
            pass
        continue
    header = pyc.read_bytes()[:16]
    if int.from_bytes(header[4:8], "little") != 0b11:
        timestamped.append(source)
    elif header[8:16] != importlib.util.source_hash(Path(source).read_bytes()):
        stale.append(source)
print(json.dumps({"sources": len(sources), "missing": len(missing), "compilable_missing": compilable_missing[:20],
                  "stale": stale[:20], "timestamped": timestamped[:20]}))
