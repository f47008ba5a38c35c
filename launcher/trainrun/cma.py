"""Cross-memory attach (CMA): whether a process here may read a sibling process's memory with process_vm_readv,
as Open MPI's shared-memory transport (btl vader) does to copy a large message once instead of twice through a
shared buffer. A seccomp profile that refuses the call (docker 20.10's default one does, docker 23's allows it),
Yama's kernel.yama.ptrace_scope 2 (without CAP_SYS_PTRACE) or 3, or an LSM's ptrace rule refuse it; Open MPI 4.1
then does not notice at start: it prints `Read -1, expected N, errno = 1` for every large message and copies
through the shared buffer after all. So the image's entrypoint runs this file once at container start and sets
OMPI_MCA_btl_vader_single_copy_mechanism to what it prints, and `trainrun doctor` reports the same.

Standard library only, so that the entrypoint runs it as a script (`python -I -S cma.py`: no site-packages to
load): it prints `cma`, or `none: WHY` in one line."""
from __future__ import annotations

import ctypes
import errno
import os
import sys
from typing import Callable

MCA_VARIABLE = "OMPI_MCA_btl_vader_single_copy_mechanism"
YAMA_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"
PR_SET_PTRACER = 0x59616D61
PR_SET_PTRACER_ANY = ctypes.c_ulong(-1)
ALLOW = "docker run --cap-add SYS_PTRACE, or docker 23+, whose default seccomp profile allows it"


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


def _yama_scope() -> int | None:
    try:
        with open(YAMA_SCOPE) as scope:
            return int(scope.read().strip())
    except (OSError, ValueError):
        return None


def _seccomp_filtered() -> bool:
    try:
        with open("/proc/self/status") as status:
            return any(line.split() == ["Seccomp:", "2"] for line in status)
    except OSError:
        return False


def _read_parent(libc: ctypes.CDLL, parent: int, source: ctypes.Array) -> int:
    """In a forked child: 0 when process_vm_readv copied the parent's buffer, else the errno."""
    target = ctypes.create_string_buffer(len(source))
    local = _IoVec(ctypes.cast(target, ctypes.c_void_p), len(source))
    remote = _IoVec(ctypes.cast(source, ctypes.c_void_p), len(source))
    copied = libc.process_vm_readv(parent, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if copied == len(source) and target.raw == source.raw:
        return 0
    return ctypes.get_errno() or errno.EIO


def refused() -> str | None:
    """None where a process may read a sibling's memory here; else why not, in a phrase.

    The probe is what an Open MPI rank does: a child reads its parent's memory (a process that is not its
    ancestor, as a sibling rank is not), after the parent allowed any process to trace it when Yama asks for that
    (Open MPI's PR_SET_PTRACER_ANY)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "process_vm_readv"):
        return "the C library has no process_vm_readv"
    scope = _yama_scope()
    if scope:
        libc.prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0)
    source = ctypes.create_string_buffer(b"trainstack cross-memory attach probe")
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        os._exit(min(_read_parent(libc, parent, source), 255))
    return explain(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), scope, _seccomp_filtered)


def explain(code: int, yama_scope: int | None, seccomp_filtered: Callable[[], bool]) -> str | None:
    """Why the probe's child failed (its exit code: 0, an errno, or minus the signal that ended it), given Yama's
    ptrace_scope (None without Yama) and whether a seccomp filter applies here."""
    if code == 0:
        return None
    if code == errno.ENOSYS:
        return "this kernel has no process_vm_readv (CONFIG_CROSS_MEMORY_ATTACH)"
    if code == errno.EPERM and yama_scope is not None and yama_scope >= 2:
        return (f"Yama's kernel.yama.ptrace_scope is {yama_scope}, which refuses process_vm_readv between sibling "
                "processes" + (" without CAP_SYS_PTRACE" if yama_scope == 2 else ""))
    if code == errno.EPERM and seccomp_filtered():
        return f"this container's seccomp profile refuses process_vm_readv ({ALLOW})"
    if code == errno.EPERM:
        return "ptrace access between processes is refused here (an LSM such as AppArmor or SELinux)"
    return f"process_vm_readv failed: {os.strerror(code) if code > 0 else f'the probe died of signal {-code}'}"


def mechanism() -> tuple[str, str | None]:
    """Open MPI's single-copy mechanism for this machine: ("cma", None), or ("none", why cma is refused)."""
    why = refused()
    return ("none", why) if why else ("cma", None)


if __name__ == "__main__":
    chosen, reason = mechanism()
    print(f"{chosen}: {reason}" if reason else chosen)
    sys.exit(0)
