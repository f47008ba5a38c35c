"""The loopback Slurm cluster refuses, in one line and before it starts anything, what its nodes cannot see: each node
has a /tmp of its own, so a checkout or a venv there is missing from every job (execve(): ... No such file)."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from trainstack.clusters.slurm import PMIX_LIBRARY, LoopbackSlurm
from trainstack.errors import TrainstackError

pytestmark = pytest.mark.skipif(shutil.which("slurmctld") is None or not PMIX_LIBRARY.exists(),
                                reason="the check comes after the one for Debian's Slurm packages")


def test_a_venv_under_tmp_is_refused_before_anything_starts(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(sys, "prefix", "/tmp/clone/.venv")
    root = Path("/var/tmp") / f"never-made-{tmp_path.name}"
    with pytest.raises(TrainstackError, match=r"the loopback Slurm cluster's jobs need the Python its jobs run, "
                                              r"/tmp/clone/.venv, which is under /tmp, and each node has a /tmp of "
                                              r"its own: clone \(and make .venv\) elsewhere"):
        LoopbackSlurm(root).start()
    assert not root.exists()
