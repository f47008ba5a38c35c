"""images/scripts/reproducible_layer.py's rewrite of Java's keystore: ca-certificates-java writes every entry with the
time of the build, so the keystore of two builds differs; rewritten, it holds the same entries with one time, in
alias order, and a digest Java accepts (the check a JKS reader makes is recomputed here)."""
from __future__ import annotations

import hashlib
import struct

import pytest
from file_modules import load_file_module

from trainstack.image.dockerfile import IMAGES_DIR, LAYER_MTIME

reproducible_layer = load_file_module(IMAGES_DIR / "scripts" / "reproducible_layer.py")


def trusted_entry(alias: str, millis: int, certificate: bytes) -> bytes:
    name, kind = alias.encode(), b"X.509"
    return (struct.pack(">IH", 2, len(name)) + name + struct.pack(">QH", millis, len(kind)) + kind
            + struct.pack(">I", len(certificate)) + certificate)


def keystore(entries: list[tuple[str, int, bytes]], password: str = "changeit") -> bytes:
    body = struct.pack(">III", 0xFEEDFEED, 2, len(entries)) + b"".join(trusted_entry(*entry) for entry in entries)
    return body + hashlib.sha1(password.encode("utf-16-be") + b"Mighty Aphrodite" + body).digest()


def test_two_builds_keystores_become_the_same_bytes_with_every_entry_at_one_time():
    first = keystore([("debian:b.pem", 1795773931000, b"cert-b"), ("debian:a.pem", 1795773931001, b"cert-a")])
    second = keystore([("debian:a.pem", 1795773974000, b"cert-a"), ("debian:b.pem", 1795773974002, b"cert-b")])
    rewritten = reproducible_layer.keystore_with_entry_time(first, LAYER_MTIME * 1000)
    assert rewritten == reproducible_layer.keystore_with_entry_time(second, LAYER_MTIME * 1000)
    assert rewritten == keystore([("debian:a.pem", LAYER_MTIME * 1000, b"cert-a"),
                                  ("debian:b.pem", LAYER_MTIME * 1000, b"cert-b")])


@pytest.mark.parametrize(("data", "message"), [
    (keystore([("debian:a.pem", 1, b"cert")], password="other"), "ca-certificates-java's password"),
    (keystore([("debian:a.pem", 1, b"cert")])[:-1] + b"\0", "ca-certificates-java's password"),
    (b"\xfe\xed\xfe\xed\x00\x00\x00\x01" + keystore([])[8:], "not a version 2 JKS keystore"),
])
def test_a_keystore_it_cannot_check_is_refused_rather_than_rewritten(data, message):
    with pytest.raises(ValueError, match=message):
        reproducible_layer.keystore_with_entry_time(data, 0)


def test_a_private_key_entry_is_refused():
    body = struct.pack(">III", 0xFEEDFEED, 2, 1) + struct.pack(">IH", 1, 1) + b"k" + struct.pack(">Q", 0)
    data = body + hashlib.sha1("changeit".encode("utf-16-be") + b"Mighty Aphrodite" + body).digest()
    with pytest.raises(ValueError, match=r"entry 0 is not a trusted certificate \(tag 1\)"):
        reproducible_layer.keystore_with_entry_time(data, 0)
