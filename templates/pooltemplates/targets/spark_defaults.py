"""A spark-defaults.conf file."""
from __future__ import annotations

from ..schema import PoolTemplate


def _escape(value: str) -> str:
    # Spark reads this file as Java properties, where backslashes and newlines are special.
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def render(template: PoolTemplate) -> str:
    conf = template.spark_conf()
    width = max(len(key) for key in conf)
    lines = [f"# Rendered from pool template {template.name}; change the template, not this file."]
    lines += [f"{key.ljust(width)}  {_escape(value)}" for key, value in conf.items()]
    return "\n".join(lines) + "\n"
