"""cosign-format key pairs for the tests, made in Python since Debian's skopeo signs with one but cannot make one and
Debian has no cosign. The format is cosign's `generate-key-pair` (sigstore's cryptoutils, secure-systems-lab's
encrypted package): the private key's PKCS#8 DER, sealed with NaCl secretbox under a key scrypt derives from the
passphrase, as JSON {kdf: {name: scrypt, params: {N, r, p}, salt}, cipher: {name: nacl/secretbox, nonce},
ciphertext} (bytes in base64) in an "ENCRYPTED SIGSTORE PRIVATE KEY" PEM; the public key a PKIX "PUBLIC KEY" PEM.
"""
from __future__ import annotations

import base64
import json
import os
import textwrap
from pathlib import Path

import nacl.secret
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

PRIVATE_KEY_TYPE = "ENCRYPTED SIGSTORE PRIVATE KEY"
SCRYPT_PARAMS = {"N": 32768, "r": 8, "p": 1}
SALT_BYTES = 32


def _pem(kind: str, data: bytes) -> bytes:
    body = "\n".join(textwrap.wrap(base64.b64encode(data).decode(), 64))
    return f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n".encode()


def _secretbox_key(passphrase: bytes, salt: bytes) -> bytes:
    return Scrypt(salt=salt, length=nacl.secret.SecretBox.KEY_SIZE, n=SCRYPT_PARAMS["N"], r=SCRYPT_PARAMS["r"],
                  p=SCRYPT_PARAMS["p"]).derive(passphrase)


def encrypt_private_key(der: bytes, passphrase: bytes, salt: bytes, nonce: bytes) -> bytes:
    """The encrypted PEM of a PKCS#8 DER private key; `salt` and `nonce` fixed for golden tests, random otherwise."""
    sealed = nacl.secret.SecretBox(_secretbox_key(passphrase, salt)).encrypt(der, nonce).ciphertext
    document = {"kdf": {"name": "scrypt", "params": SCRYPT_PARAMS, "salt": base64.b64encode(salt).decode()},
                "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(nonce).decode()},
                "ciphertext": base64.b64encode(sealed).decode()}
    return _pem(PRIVATE_KEY_TYPE, json.dumps(document, separators=(",", ":")).encode())


def write_key_pair(folder: Path, passphrase: str, name: str = "cosign") -> tuple[Path, Path]:
    """(NAME.key, NAME.pub) in FOLDER, as `cosign generate-key-pair` writes them: a new ECDSA P-256 key."""
    private = ec.generate_private_key(ec.SECP256R1())
    der = private.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    key, pub = folder / f"{name}.key", folder / f"{name}.pub"
    key.write_bytes(encrypt_private_key(der, passphrase.encode(), os.urandom(SALT_BYTES),
                                        os.urandom(nacl.secret.SecretBox.NONCE_SIZE)))
    key.chmod(0o600)
    pub.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo))
    return key, pub
