"""Which environment variables reach every rank, on every host."""
from __future__ import annotations

from typing import Iterable, Mapping

from .errors import UsageError
from .validate import key_value

FORWARDED_NAMES = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONUNBUFFERED", "VIRTUAL_ENV")
FORWARDED_PREFIXES = ("NCCL_", "HOROVOD_", "CUDA_", "GLOO_", "TORCH_", "OMP_")


def user_env(option: str, specs: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
    """`-x NAME` takes NAME's current value, `-x NAME=VALUE` sets it."""
    env = {}
    for spec in specs:
        if "=" in spec:
            name, value = key_value(option, spec)
        elif spec in environ:
            name, value = spec, environ[spec]
        else:
            raise UsageError(option, spec, "NAME=VALUE or the name of a variable set in the environment")
        env[name] = value
    return env


def forwarded_names(environ: Mapping[str, str], extra: Iterable[str]) -> list[str]:
    names = {n for n in environ if n in FORWARDED_NAMES or n.startswith(FORWARDED_PREFIXES)}
    return sorted(names | set(extra))
