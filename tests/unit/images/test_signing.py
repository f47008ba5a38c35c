"""cosign's formats as trainstack.image.signing reads and writes them, held to what cosign itself made:
- golden/cosign-generated.key: a key `cosign generate-key-pair` wrote with an empty passphrase (scrypt N=65536),
  sigstore-rs's tests/data/keys/cosign_generated_encrypted_empty_private.key (github.com/sigstore/sigstore-rs at
  038e36aefac21dd4ae608cda33736a494250fd1f; Apache-2.0, Copyright The Sigstore Authors);
- COSIGN_*: the ECDSA P-256 signature of cosign's simple-signing payload for registry-testing.svc.lan/busybox and its
  public key, which sigstore-rs's tests verify as a cosign signature layer's (src/crypto/verification_key.rs,
  src/cosign/signature_layers.rs, at the same commit; Apache-2.0, Copyright The Sigstore Authors);
- golden/cosign-golden.key: a key tests/support/signing_keys.py sealed with a fixed salt and nonce.
"""
import base64
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from signing_keys import encrypt_private_key

from trainstack.errors import TrainstackError
from trainstack.image.signing import (
    PASSPHRASE_ENV,
    PAYLOAD_MEDIA_TYPE,
    SIGNATURE_ANNOTATION,
    SigningKey,
    _verifies,
    load_public_key,
    load_signing_key,
    signature_manifest,
    signature_tag,
    simple_signing_payload,
)

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_SCALAR = 0x7472616E6E737461636B2D676F6C64656E
GOLDEN_PASSPHRASE = "golden-passphrase"
COSIGN_PUBLIC_KEY = b"""-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAENptdY/l3nB0yqkXLBWkZWQwo6+cu
OSWS1X9vPavpiQOoTTGC0xX57OojUadxF1cdQmrsiReWg2Wn4FneJfa8xw==
-----END PUBLIC KEY-----
"""
COSIGN_REPOSITORY = "registry-testing.svc.lan/busybox"
COSIGN_DIGEST = "sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b"
COSIGN_PAYLOAD = (b'{"critical":{"identity":{"docker-reference":"registry-testing.svc.lan/busybox"},"image":{'
                  b'"docker-manifest-digest":"sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b"},'
                  b'"type":"cosign container image signature"},"optional":null}')
COSIGN_SIGNATURE = "MEUCIQD6q/COgzOyW0YH1Dk+CCYSt4uAhm3FDHUwvPI55zwnlwIgE0ZK58ZOWpZw8YVmBapJhBqCfdPekIknimuO0xH8Jh8="


def test_the_payload_is_cosigns_byte_for_byte():
    assert simple_signing_payload(COSIGN_REPOSITORY, COSIGN_DIGEST) == COSIGN_PAYLOAD
    assert signature_tag(COSIGN_DIGEST) == "sha256-" + COSIGN_DIGEST[7:] + ".sig"


def test_cosigns_signature_verifies_and_another_key_or_payload_does_not(tmp_path):
    public = tmp_path / "cosign.pub"
    public.write_bytes(COSIGN_PUBLIC_KEY)
    layer = {"mediaType": PAYLOAD_MEDIA_TYPE, "annotations": {SIGNATURE_ANNOTATION: COSIGN_SIGNATURE}}
    assert _verifies(load_public_key("--key", str(public)), COSIGN_PAYLOAD, layer)
    assert not _verifies(load_public_key("--key", str(public)), COSIGN_PAYLOAD.replace(b"f3cf", b"f3ce"), layer)
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    assert not _verifies(other, COSIGN_PAYLOAD, layer)


def test_a_key_cosign_generated_opens():
    key = load_signing_key("--sign-key", str(GOLDEN / "cosign-generated.key"), "")
    assert isinstance(key.key.curve, ec.SECP256R1)


def test_the_key_format_is_golden_and_round_trips():
    private = ec.derive_private_key(GOLDEN_SCALAR, ec.SECP256R1())
    der = private.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    pem = encrypt_private_key(der, GOLDEN_PASSPHRASE.encode(), bytes(range(32)), bytes(range(24)))
    assert pem == (GOLDEN / "cosign-golden.key").read_bytes()
    document = json.loads(base64.b64decode("".join(pem.decode().splitlines()[1:-1])))
    assert document["kdf"]["params"] == {"N": 32768, "r": 8, "p": 1}
    assert (document["kdf"]["name"], document["cipher"]["name"]) == ("scrypt", "nacl/secretbox")
    opened = load_signing_key("--sign-key", str(GOLDEN / "cosign-golden.key"), GOLDEN_PASSPHRASE)
    assert opened.key.private_numbers().private_value == GOLDEN_SCALAR


def test_a_signature_made_here_verifies_with_the_public_key():
    key = SigningKey(GOLDEN / "cosign-golden.key", ec.derive_private_key(GOLDEN_SCALAR, ec.SECP256R1()))
    payload = simple_signing_payload("127.0.0.1:5000/trainstack", COSIGN_DIGEST)
    signature = base64.b64encode(key.key.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()
    assert _verifies(key.key.public_key(), payload, {"annotations": {SIGNATURE_ANNOTATION: signature}})


def test_the_signature_manifest_has_cosigns_shape():
    layer = {"mediaType": PAYLOAD_MEDIA_TYPE, "digest": "sha256:" + "3a" * 32, "size": 245,
             "annotations": {SIGNATURE_ANNOTATION: COSIGN_SIGNATURE}}
    config, manifest = signature_manifest([layer])
    document = json.loads(manifest)
    assert document["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert document["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert document["layers"] == [layer]
    assert json.loads(config)["rootfs"] == {"type": "layers", "diff_ids": [layer["digest"]]}


@pytest.mark.parametrize(("file", "passphrase", "message"), [
    ("cosign-golden.key", "wrong", f"${PASSPHRASE_ENV} = '(hidden)': does not open {{path}} (valid: that key's "
                                   "passphrase)"),
    ("cosign-golden.key", None, f"${PASSPHRASE_ENV} = '': is not set while --sign-key is given (valid: the key's "
                                "passphrase (empty for a key made with an empty one))"),
    ("sbom.cdx.json", "", "--sign-key = '{path}': is not a cosign private key file (valid: a key `cosign "
                          f"generate-key-pair` wrote (cosign.key), its passphrase in ${PASSPHRASE_ENV})"),
])
def test_a_bad_key_or_passphrase_is_one_line(file, passphrase, message):
    path = str(GOLDEN / file)
    with pytest.raises(TrainstackError) as refused:
        load_signing_key("--sign-key", path, passphrase)
    assert str(refused.value) == message.format(path=path)
