"""Ends a RUN step of the image so that its layer is the same in every build whose inputs are the same.

    reproducible_layer.py STARTED_NS MTIME

STARTED_NS is when the step began (`date +%s%N`). A layer records each file's mtime, so every file, link and folder
of the root filesystem modified since then gets MTIME (files dpkg unpacked keep their package's mtimes, which are
already fixed). What records when the step ran is emptied, not removed (removing a file of a lower layer leaves a
whiteout stamped with the time of the build): apt's and dpkg's logs and ldconfig's auxiliary cache, which the next
apt-get or ldconfig writes again. Java's keystore, which ca-certificates-java writes with the time of every entry,
gets MTIME as every entry's time.
"""
from __future__ import annotations

import hashlib
import os
import struct
import sys
from pathlib import Path

RUN_RECORDS = ("/var/log/dpkg.log", "/var/log/alternatives.log", "/var/log/apt/history.log", "/var/log/apt/term.log",
               "/var/log/apt/eipp.log.xz", "/var/cache/ldconfig/aux-cache")
JAVA_KEYSTORE = Path("/etc/ssl/certs/java/cacerts")
# ca-certificates-java's store password (its storepass default); a JKS file ends in a SHA-1 keyed with it.
JAVA_KEYSTORE_PASSWORD = "changeit"
JKS_MAGIC, JKS_TRUSTED_CERT = 0xFEEDFEED, 2
# Linux stamps files with a coarse clock, up to a tick behind `date`; a second of margin takes files the step wrote.
CLOCK_MARGIN_NS = 1_000_000_000


def jks_digest(body: bytes) -> bytes:
    return hashlib.sha1(JAVA_KEYSTORE_PASSWORD.encode("utf-16-be") + b"Mighty Aphrodite" + body).digest()


def keystore_with_entry_time(data: bytes, millis: int) -> bytes:
    """A JKS keystore of trusted certificates with every entry's creation time set to millis, entries by alias."""
    body, digest = data[:-20], data[-20:]
    magic, version, count = struct.unpack_from(">III", body)
    if magic != JKS_MAGIC or version != 2 or jks_digest(body) != digest:
        raise ValueError("not a version 2 JKS keystore with ca-certificates-java's password")
    offset, entries = 12, []
    for _ in range(count):
        start = offset
        (tag,) = struct.unpack_from(">I", body, offset)
        if tag != JKS_TRUSTED_CERT:
            raise ValueError(f"entry {len(entries)} is not a trusted certificate (tag {tag})")
        (alias_length,) = struct.unpack_from(">H", body, offset + 4)
        alias = body[offset + 6:offset + 6 + alias_length]
        offset += 6 + alias_length + 8
        (type_length,) = struct.unpack_from(">H", body, offset)
        offset += 2 + type_length
        (cert_length,) = struct.unpack_from(">I", body, offset)
        offset += 4 + cert_length
        entry = bytearray(body[start:offset])
        struct.pack_into(">Q", entry, 6 + alias_length, millis)
        entries.append((alias, bytes(entry)))
    if offset != len(body):
        raise ValueError(f"{len(body) - offset} bytes after the last entry")
    new_body = body[:12] + b"".join(entry for _, entry in sorted(entries))
    return new_body + jks_digest(new_body)


def modified_since(started_ns: int) -> list[str]:
    """Every file, link and folder of the root filesystem modified since started_ns (docker's bind mounts, such as
    /etc/hosts, are other filesystems)."""
    root_device = os.lstat("/").st_dev
    paths = []
    for folder, dirs, files in os.walk("/"):
        for name in [*dirs, *files]:
            path = os.path.join(folder, name)
            stat = os.lstat(path)
            if stat.st_dev != root_device:
                if name in dirs:
                    dirs.remove(name)
            elif stat.st_mtime_ns >= started_ns:
                paths.append(path)
    return paths


def main() -> None:
    started_ns, mtime = int(sys.argv[1]) - CLOCK_MARGIN_NS, int(sys.argv[2])
    for record in RUN_RECORDS:
        if os.path.exists(record) and os.lstat(record).st_mtime_ns >= started_ns:
            os.truncate(record, 0)
    if JAVA_KEYSTORE.is_file() and JAVA_KEYSTORE.stat().st_mtime_ns >= started_ns:
        JAVA_KEYSTORE.write_bytes(keystore_with_entry_time(JAVA_KEYSTORE.read_bytes(), mtime * 1000))
    # Setting a path's times leaves its folder's as they are, so the order does not matter.
    for path in modified_since(started_ns):
        os.utime(path, (mtime, mtime), follow_symlinks=False)


if __name__ == "__main__":
    main()
