"""What the Ray targets need of a template: one Ray worker node per executor, sized as the executor (its cores and
memory), and, where a target starts the head, the head sized as the driver. Unset, Ray would size a node as the host it
runs on, so the targets refuse a template without them."""
from __future__ import annotations

from ..errors import Problem
from ..schema import PoolTemplate, field_value

# field -> (what it sizes, a setting that would do)
SIZES = {
    "executor.cores": ("each Ray worker node's CPUs", "a whole number, e.g. --set executor.cores=8"),
    "executor.memory": ("each Ray worker node's memory", "a size, e.g. --set executor.memory=32g"),
    "driver.cores": ("the Ray head's CPUs", "a whole number, e.g. --set driver.cores=2"),
    "driver.memory": ("the Ray head's memory", "a size, e.g. --set driver.memory=8g"),
}
WORKER_FIELDS = ("executor.cores", "executor.memory")
HEAD_FIELDS = ("driver.cores", "driver.memory")


def missing_sizes(template: PoolTemplate, target: str, fields: tuple[str, ...]) -> list[Problem]:
    """A problem for each of `fields` the template leaves unset."""
    return [Problem(name, None, f"is unset, and {target} takes {SIZES[name][0]} from it", SIZES[name][1])
            for name in fields if field_value(template, name) is None]
