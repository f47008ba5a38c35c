"""Brings distributions' RECORD files in step with their files after the build changed them (stripped their
extensions).

pip writes each installed file's sha256 and size into RECORD as it installs it; the builder's slimming strips the
compiled components' extensions afterwards, so RECORD named bytes the image does not hold, and bytes of a compile's
output that two builds need not give alike (the stripped files are the same). Every row whose file now differs gets
the file's hash and size, written as pip writes them. Usage: record_hashes.py SITE_PACKAGES DISTRIBUTION...
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import sys
from pathlib import Path

from venv_layers import canonical  # the builder's scripts folder: the name rule the layers' split uses


def file_hash(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def record_of(site_packages: Path, distribution: str) -> Path:
    found = [path for path in site_packages.glob("*.dist-info/RECORD")
             if canonical(path.parent.name.removesuffix(".dist-info").split("-")[0]) == canonical(distribution)]
    if len(found) != 1:
        raise SystemExit(f"error: {site_packages}: {len(found)} RECORD files of {distribution}, expected 1")
    return found[0]


def rehash(site_packages: Path, distribution: str) -> list[str]:
    """Rewrites the distribution's RECORD rows whose file changed; returns their paths."""
    record = record_of(site_packages, distribution)
    rows = list(csv.reader(io.StringIO(record.read_text(encoding="utf-8"))))
    changed = []
    for row in rows:
        path, digest = site_packages / row[0], row[1]
        if digest and path.is_file():
            current = file_hash(path)
            if current != digest:
                row[1], row[2] = current, str(path.stat().st_size)
                changed.append(row[0])
    if changed:
        text = io.StringIO()
        csv.writer(text).writerows(rows)  # csv's \r\n line ends, as pip writes RECORD
        record.write_bytes(text.getvalue().encode("utf-8"))
    return changed


def main() -> None:
    site_packages = Path(sys.argv[1])
    for distribution in sys.argv[2:]:
        for path in rehash(site_packages, distribution):
            print(f"RECORD of {distribution}: {path} hashed again")


if __name__ == "__main__":
    main()
