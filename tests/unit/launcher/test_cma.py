"""The cross-memory attach probe (trainrun.cma): why it says cma is refused, and the line the image's entrypoint
reads from it. Where the probe is refused for real (a seccomp profile, Yama) is the image tier's:
tests/image/test_open_mpi_settings.py."""
from __future__ import annotations

import errno
import subprocess
import sys

import pytest

from trainrun import cma


@pytest.mark.parametrize("code, scope, filtered, why", [
    (0, 1, True, None),
    (errno.EPERM, 3, True, "Yama's kernel.yama.ptrace_scope is 3, which refuses process_vm_readv between sibling "
                           "processes"),
    (errno.EPERM, 2, False, "Yama's kernel.yama.ptrace_scope is 2, which refuses process_vm_readv between sibling "
                            "processes without CAP_SYS_PTRACE"),
    (errno.EPERM, 1, True, "this container's seccomp profile refuses process_vm_readv (docker run --cap-add "
                           "SYS_PTRACE, or docker 23+, whose default seccomp profile allows it)"),
    (errno.EPERM, None, False, "ptrace access between processes is refused here (an LSM such as AppArmor or SELinux)"),
    (errno.ENOSYS, None, True, "this kernel has no process_vm_readv (CONFIG_CROSS_MEMORY_ATTACH)"),
    (errno.EFAULT, None, False, "process_vm_readv failed: Bad address"),
    (-9, None, False, "process_vm_readv failed: the probe died of signal 9"),
])
def test_the_probe_says_what_refused_cross_memory_attach(code, scope, filtered, why) -> None:
    assert cma.explain(code, scope, lambda: filtered) == why


def test_the_script_prints_the_mechanism_and_why_in_one_line() -> None:
    """What the entrypoint runs (`python -I -S cma.py`, the standard library only) agrees with the module."""
    printed = subprocess.run([sys.executable, "-I", "-S", cma.__file__], capture_output=True, text=True, check=True)
    chosen, why = cma.mechanism()
    assert printed.stdout == (f"none: {why}\n" if why else "cma\n") and chosen in ("cma", "none")
