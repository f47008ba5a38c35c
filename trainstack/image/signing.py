"""Signatures of pushed images with a key, in cosign's format: `invoke push --sign-key cosign.key` signs the pushed
digest, `cosign verify --key cosign.pub --insecure-ignore-tlog=true REF` (or verify_signature) checks it. CI signs
keyless with cosign instead (.ci/publish).

They are made here, not by a tool: Debian has no cosign, and Debian's skopeo 1.9, which has
`--sign-by-sigstore-private-key`, is built without sigstore ("Debian-local change: sigstore disabled").

The key is the one `cosign generate-key-pair` writes: an ECDSA P-256 key as PKCS#8 DER, sealed with NaCl secretbox
under a key scrypt derives from the passphrase ($TRAINSTACK_SIGN_PASSPHRASE), as a JSON document in an "ENCRYPTED
SIGSTORE PRIVATE KEY" PEM (older cosign: "ENCRYPTED COSIGN PRIVATE KEY"). The signature is cosign's attached one:
the tag sha256-<hex of the image's digest>.sig holds an OCI manifest each of whose layers is a simple-signing
payload naming the repository and the digest, with its ECDSA signature (SHA-256, DER, base64) in the layer's
annotation dev.cosignproject.cosign/signature. No transparency-log entry is made, hence cosign's
--insecure-ignore-tlog=true.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nacl.exceptions
import nacl.secret
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from trainstack.errors import TrainstackError, bad_value
from trainstack.image.artifacts import OCI_MANIFEST, descriptor, referrers_tag
from trainstack.image.naming import image_reference
from trainstack.image.registry import RegistryClient

PASSPHRASE_ENV = "TRAINSTACK_SIGN_PASSPHRASE"
PRIVATE_KEY_TYPES = ("ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY")
PAYLOAD_MEDIA_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
PAYLOAD_TYPE = "cosign container image signature"
_ZERO_TIME = "0001-01-01T00:00:00Z"
KEY_VALID = "a key `cosign generate-key-pair` wrote (cosign.key), its passphrase in $" + PASSPHRASE_ENV


@dataclass(frozen=True)
class SigningKey:
    path: Path
    key: ec.EllipticCurvePrivateKey


def _pem_body(text: str, types: tuple[str, ...]) -> bytes | None:
    lines = text.strip().splitlines()
    if len(lines) < 3 or lines[0] not in {f"-----BEGIN {kind}-----" for kind in types}:
        return None
    return base64.b64decode("".join(lines[1:-1]))


def load_signing_key(option: str, path: str, passphrase: str | None) -> SigningKey:
    """The private key of a cosign key file, opened with `passphrase`; checked before anything is pushed."""
    file = Path(path)
    try:
        document = json.loads(_pem_body(file.read_text(), PRIVATE_KEY_TYPES) or b"null")
    except (OSError, UnicodeDecodeError, ValueError):
        document = None
    if not isinstance(document, dict):
        raise bad_value(option, path, "is not a cosign private key file", KEY_VALID)
    if passphrase is None:
        raise bad_value(f"${PASSPHRASE_ENV}", "", f"is not set while {option} is given",
                        "the key's passphrase (empty for a key made with an empty one)")
    try:
        kdf, cipher = document["kdf"], document["cipher"]
        if kdf["name"] != "scrypt" or cipher["name"] != "nacl/secretbox":
            raise bad_value(option, path, f"is sealed with {kdf['name']} and {cipher['name']}",
                            "scrypt and nacl/secretbox, as cosign seals its keys")
        params = kdf["params"]
        secret = Scrypt(salt=base64.b64decode(kdf["salt"]), length=nacl.secret.SecretBox.KEY_SIZE, n=params["N"],
                        r=params["r"], p=params["p"]).derive(passphrase.encode())
        der = nacl.secret.SecretBox(secret).decrypt(base64.b64decode(document["ciphertext"]),
                                                    base64.b64decode(cipher["nonce"]))
    except nacl.exceptions.CryptoError:
        raise bad_value(f"${PASSPHRASE_ENV}", "(hidden)", f"does not open {path}", "that key's passphrase") from None
    except (KeyError, TypeError, ValueError):
        raise bad_value(option, path, "is not a cosign private key file", KEY_VALID) from None
    key = serialization.load_der_private_key(der, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise bad_value(option, path, f"holds a {type(key).__name__}", "an ECDSA key, as cosign makes")
    return SigningKey(file, key)


def load_public_key(option: str, path: str) -> ec.EllipticCurvePublicKey:
    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except (OSError, ValueError):
        key = None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise bad_value(option, path, "is not an ECDSA public key file", "cosign.pub, a PEM PUBLIC KEY")
    return key


def simple_signing_payload(repository: str, digest: str) -> bytes:
    """What is signed, byte for byte as cosign writes it: the repository (HOST/NAME) and the manifest digest."""
    return json.dumps({"critical": {"identity": {"docker-reference": repository},
                                    "image": {"docker-manifest-digest": digest}, "type": PAYLOAD_TYPE},
                       "optional": None}, separators=(",", ":")).encode()


def signature_manifest(layers: list[dict[str, Any]]) -> tuple[bytes, bytes]:
    """(config, manifest) of the .sig tag holding the signature layers `layers`, as cosign shapes them."""
    config = json.dumps({"architecture": "", "created": _ZERO_TIME, "history": [{"created": _ZERO_TIME}],
                         "os": "", "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]},
                         "config": {}}, separators=(",", ":")).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": descriptor(CONFIG_MEDIA_TYPE, config), "layers": layers},
                          separators=(",", ":")).encode()
    return config, manifest


def signature_tag(digest: str) -> str:
    return f"{referrers_tag(digest)}.sig"


def sign_image(remote: RegistryClient, name: str, repository: str, digest: str, key: SigningKey) -> bool:
    """Adds the signature of manifest DIGEST of repository NAME (HOST/NAME is `repository`) beside those there;
    False, adding none, where this key signed it already (as cosign, which skips a signature it finds)."""
    payload = simple_signing_payload(repository, digest)
    layers = _signature_layers(remote, name, digest)
    public_key = key.key.public_key()
    if any(entry["digest"] == descriptor(PAYLOAD_MEDIA_TYPE, payload)["digest"]
           and _verifies(public_key, payload, entry) for entry in layers):
        return False
    signature = base64.b64encode(key.key.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()
    layers.append(descriptor(PAYLOAD_MEDIA_TYPE, payload, annotations={SIGNATURE_ANNOTATION: signature}))
    config, manifest = signature_manifest(layers)
    remote.put_blob(name, payload)
    remote.put_blob(name, config)
    remote.put_manifest(name, signature_tag(digest), manifest, OCI_MANIFEST)
    return True


def _signature_layers(remote: RegistryClient, name: str, digest: str) -> list[dict[str, Any]]:
    found = remote.manifest_bytes(name, signature_tag(digest), OCI_MANIFEST)
    return json.loads(found[1]).get("layers", []) if found else []


def _verifies(public_key: ec.EllipticCurvePublicKey, payload: bytes, layer: dict[str, Any]) -> bool:
    try:
        public_key.verify(base64.b64decode(layer.get("annotations", {}).get(SIGNATURE_ANNOTATION, "")), payload,
                          ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError):
        return False
    return True


def verify_signature(remote: RegistryClient, name: str, reference: str, public_key: ec.EllipticCurvePublicKey,
                     key_name: str) -> str:
    """The manifest digest of NAME:REFERENCE (a tag or digest) once a signature of it by `public_key` is found
    there, whose payload names that digest; else the error, one line."""
    image = remote.manifest(name, reference)
    shown = image_reference(name, reference, remote.host)
    if image is None:
        raise TrainstackError(f"verify: the registry {remote.host} holds no image {shown}")
    layers = _signature_layers(remote, name, image.digest)
    if not layers:
        raise TrainstackError(f"verify: {shown} ({image.digest}) is not signed: {remote.host}/{name} has no "
                              f"{signature_tag(image.digest)}")
    for layer in layers:
        payload = remote.blob(name, layer["digest"]) if layer.get("mediaType") == PAYLOAD_MEDIA_TYPE else None
        if payload is None or not _verifies(public_key, payload, layer):
            continue
        signed = json.loads(payload).get("critical", {}).get("image", {}).get("docker-manifest-digest")
        if signed == image.digest:
            return image.digest
    raise TrainstackError(f"verify: none of the {len(layers)} signatures of {shown} ({image.digest}) is made by "
                          f"the key {key_name}")
