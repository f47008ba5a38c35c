"""What the loopback Slurm cluster keeps in each node's own /tmp: a checkout or a venv under /tmp, which the jobs run,
mounted at its path there (without it: `execve(): ... No such file`), each once."""
from __future__ import annotations

from pathlib import Path

from loopback_slurm import shared_under_tmp


def test_a_checkout_under_tmp_is_shared_once_with_the_venv_inside_it() -> None:
    assert shared_under_tmp([Path("/tmp/clone"), Path("/tmp/clone/.venv")]) == [Path("/tmp/clone")]


def test_paths_elsewhere_are_the_nodes_own_already() -> None:
    assert shared_under_tmp([Path("/var/tmp/clone"), Path("/opt/venv")]) == []
    assert shared_under_tmp([Path("/home/a/clone"), Path("/tmp/venv")]) == [Path("/tmp/venv")]
