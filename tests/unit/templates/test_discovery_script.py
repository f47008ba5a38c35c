"""The packaged GPU discovery script prints Spark ResourceInformation JSON."""
import json
import os
import stat
import subprocess
from pathlib import Path

from pooltemplates import package_file
from pooltemplates.loading import DISCOVERY_SCRIPT


def discover(env: dict[str, str]) -> dict:
    script = package_file(DISCOVERY_SCRIPT)
    result = subprocess.run([str(script)], env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_script_is_executable() -> None:
    assert package_file(DISCOVERY_SCRIPT).stat().st_mode & stat.S_IXUSR


def test_placeholder_addresses_win() -> None:
    env = {"PATH": os.environ["PATH"], "TRAINSTACK_GPU_ADDRESSES": "0,1,2"}
    assert discover(env) == {"name": "gpu", "addresses": ["0", "1", "2"]}


def test_nvidia_smi_reports_real_gpus(tmp_path: Path) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nprintf '0\\n1\\n'\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}"}
    assert discover(env) == {"name": "gpu", "addresses": ["0", "1"]}


def test_no_gpus_and_no_placeholders_report_none(tmp_path: Path) -> None:
    # Only `tr` from coreutils is needed, and only for placeholders; an empty PATH hides nvidia-smi.
    assert discover({"PATH": str(tmp_path)}) == {"name": "gpu", "addresses": []}
