"""Brings pyspark/python/lib/pyspark.zip in step with the patched pyspark package beside it.

Spark's Python workers (the executors' side of TorchDistributor and DeepspeedTorchDistributor) import PySpark from
that archive, not from site-packages, so a patch applied to the package alone would reach the driver only. Every
entry of the archive whose file under site-packages now differs is rewritten with the file's bytes; the archive is
replaced whole (zipfile cannot rewrite an entry in place). Usage: sync_pyspark_zip.py SITE_PACKAGES
"""
from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path


def sync(site_packages: Path) -> list[str]:
    archive = site_packages / "pyspark" / "python" / "lib" / "pyspark.zip"
    rewritten = []
    staged = archive.with_suffix(".zip.tmp")
    with zipfile.ZipFile(archive) as source, zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as target:
        for entry in source.infolist():
            data = source.read(entry)
            installed = site_packages / entry.filename
            if not entry.is_dir() and installed.is_file() and installed.read_bytes() != data:
                data = installed.read_bytes()
                rewritten.append(entry.filename)
            target.writestr(entry, data)
    os.replace(staged, archive)
    return rewritten


if __name__ == "__main__":
    for name in sync(Path(sys.argv[1])):
        print(f"pyspark.zip: {name} from the patched package")
