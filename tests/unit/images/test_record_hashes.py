"""images/scripts/record_hashes.py: a compiled component's RECORD made to name its files as the build left them."""
import base64
import hashlib

import pytest
from file_modules import load_file_module

from trainstack.image.dockerfile import IMAGES_DIR

record_hashes = load_file_module(IMAGES_DIR / "scripts" / "record_hashes.py")


def pip_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@pytest.fixture
def site_packages(tmp_path):
    """A distribution as pip installs it: RECORD's rows with csv's \\r\\n line ends, one file without a hash."""
    (tmp_path / "horovod" / "torch").mkdir(parents=True)
    (tmp_path / "horovod" / "__init__.py").write_bytes(b"VERSION = 1\n")
    (tmp_path / "horovod" / "torch" / "mpi_lib.so").write_bytes(b"compiled with symbols")
    dist_info = tmp_path / "horovod-0.28.1.dist-info"
    dist_info.mkdir()
    rows = [f"horovod/__init__.py,{pip_hash(b'VERSION = 1' + bytes([10]))},12",
            f"horovod/torch/mpi_lib.so,{pip_hash(b'compiled with symbols')},21",
            "horovod-0.28.1.dist-info/RECORD,,"]
    (dist_info / "RECORD").write_bytes("".join(f"{row}\r\n" for row in rows).encode())
    return tmp_path


def test_a_stripped_file_gets_its_new_hash_and_size_and_nothing_else_changes(site_packages):
    (site_packages / "horovod" / "torch" / "mpi_lib.so").write_bytes(b"stripped")
    before = (site_packages / "horovod-0.28.1.dist-info" / "RECORD").read_bytes().split(b"\r\n")
    assert record_hashes.rehash(site_packages, "horovod") == ["horovod/torch/mpi_lib.so"]
    after = (site_packages / "horovod-0.28.1.dist-info" / "RECORD").read_bytes().split(b"\r\n")
    assert after[1] == f"horovod/torch/mpi_lib.so,{pip_hash(b'stripped')},8".encode()
    assert [after[0], *after[2:]] == [before[0], *before[2:]]


def test_an_unchanged_distribution_is_left_as_it_was(site_packages):
    record = site_packages / "horovod-0.28.1.dist-info" / "RECORD"
    before = record.read_bytes()
    assert record_hashes.rehash(site_packages, "horovod") == []
    assert record.read_bytes() == before


def test_a_distribution_without_one_record_is_one_line(site_packages):
    with pytest.raises(SystemExit, match="error: .*: 0 RECORD files of deepspeed, expected 1"):
        record_hashes.rehash(site_packages, "deepspeed")
