"""spark-submit `--conf` arguments, one per line, shell-quoted."""
from __future__ import annotations

import shlex
from collections.abc import Mapping

from ..schema import PoolTemplate


def conf_args(conf: Mapping[str, str]) -> str:
    return "".join(f"--conf {shlex.quote(f'{key}={value}')}\n" for key, value in conf.items())


def render(template: PoolTemplate) -> str:
    return conf_args(template.spark_conf())
