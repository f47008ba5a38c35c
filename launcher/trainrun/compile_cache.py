"""Where torch.compile's compilers keep what they build, and whether it can be loaded from there.

Inductor (its cache: TORCHINDUCTOR_CACHE_DIR, else torchinductor_USER in the temp dir) and Triton (TRITON_CACHE_DIR)
build shared objects into their caches and load them from there; a mount with noexec refuses to map them. Docker
mounts `--tmpfs /tmp` noexec unless told `:exec`, so `docker run --read-only --tmpfs /tmp` makes torch.compile build
for minutes and then fail with "failed to map segment from shared object". `trainrun doctor` reports it; the image's
site hook (images/site-packages/trainstack_compile_cache.py) says it as torch.compile starts.
"""
from __future__ import annotations

import getpass
import importlib.util
import os
import re
import tempfile
from typing import Iterator, Mapping

from .errors import UsageError

INDUCTOR_CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
TRITON_CACHE_VARIABLE = "TRITON_CACHE_DIR"


def inductor_cache_dir(environ: Mapping[str, str]) -> str:
    """The directory Inductor caches in, as torch._inductor.runtime.cache_dir_utils.default_cache_dir decides it."""
    if environ.get(INDUCTOR_CACHE_VARIABLE):
        return environ[INDUCTOR_CACHE_VARIABLE]
    try:
        user = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
    except (KeyError, OSError):  # a uid without a name (docker run --user 4321)
        user = str(os.getuid())
    return os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")


def compiler_caches(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(variable, directory) of each cache torch.compile loads shared objects from: Inductor's, and Triton's where
    Triton is installed (GPU builds of torch) and TRITON_CACHE_DIR names it (the images set it; Triton's default is
    under the home)."""
    caches = [(INDUCTOR_CACHE_VARIABLE, inductor_cache_dir(environ))]
    if environ.get(TRITON_CACHE_VARIABLE) and importlib.util.find_spec("triton") is not None:
        caches.append((TRITON_CACHE_VARIABLE, environ[TRITON_CACHE_VARIABLE]))
    return caches


def noexec_mount(path: str) -> str | None:
    """The mount point `path` lies on (or would, once made) when that mount is noexec; else None."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    try:
        if not os.statvfs(existing).f_flag & os.ST_NOEXEC:
            return None
    except OSError:
        return None
    while not os.path.ismount(existing):
        existing = os.path.dirname(existing)
    return existing


def noexec_problem(variable: str, directory: str, mount: str) -> UsageError:
    """A cache on a noexec mount, as one line: the variable, the directory, why torch.compile fails, what to do."""
    return UsageError(variable, directory, f"is on {mount}, a noexec mount: torch.compile cannot load the kernels "
                      "it builds there", valid=f"{variable}=DIR on a mount with exec, or {mount} mounted with exec, "
                                               f"e.g. docker run --tmpfs {mount}:exec")


def noexec_problems(environ: Mapping[str, str]) -> Iterator[UsageError]:
    for variable, directory in compiler_caches(environ):
        mount = noexec_mount(directory)
        if mount is not None:
            yield noexec_problem(variable, directory, mount)
