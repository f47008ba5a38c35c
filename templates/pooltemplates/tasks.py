"""invoke tasks for pool templates: list, validate, render (mounted as the `template` collection)."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

from invoke import task
from invoke.exceptions import Exit

from pooltemplates import (TARGETS, PoolTemplate, TemplateError, TemplateWarning, load_template,
                           packaged_templates, parse_assignments, read_template, render)
from pooltemplates.render import target_parameters

OVERRIDE_HELP = "override a setting, e.g. executor.instances=4 (repeatable)"


def _load(name: str, overrides: list[str]) -> PoolTemplate:
    """Load and validate, printing warnings to stderr; template errors end the task with code 1."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TemplateWarning)
        try:
            template = load_template(name, parse_assignments(overrides))
        except TemplateError as exc:
            raise Exit(str(exc), code=1) from None
    for warning in caught:
        print(f"warning: {warning.message}", file=sys.stderr)
    return template


@task(name="list")
def list_(c):
    """List the packaged templates and the render targets with their parameters."""
    print("templates:")
    for name in packaged_templates():
        print(f"  {name}: {read_template(name).description}")
    print("targets:")
    for target in TARGETS:
        parameters = ", ".join(target_parameters(target)) or "-"
        print(f"  {target} (parameters: {parameters})")


@task(iterable=["set_"], help={"name": "a packaged template or a .yaml path", "set_": OVERRIDE_HELP})
def validate(c, name, set_=None):
    """Check a template against every rule; exit 1 listing all errors."""
    _load(name, set_ or [])
    print(f"{name}: valid")


@task(
    name="render",
    iterable=["set_"],
    help={
        "name": "a packaged template or a .yaml path",
        "target": "one of " + ", ".join(TARGETS),
        "set_": OVERRIDE_HELP,
        "out": "write here instead of stdout",
        "image": "kubernetes, local-pool: container image",
        "node_type": "databricks: worker node type",
        "driver_node_type": "databricks: driver node type (default: the worker's)",
        "spark_version": "databricks: runtime version",
        "gpus": "local-pool: placeholder (default) or nvidia",
        "pool_name": "local-pool: prefix of network and container names",
    },
)
def render_(c, name, target, set_=None, out=None, image=None, node_type=None,
            driver_node_type=None, spark_version=None, gpus=None, pool_name=None):
    """Render a validated template for a target (spark-submit, synapse, databricks, ...)."""
    template = _load(name, set_ or [])
    try:
        text = render(template, target, image=image, node_type=node_type,
                      driver_node_type=driver_node_type, spark_version=spark_version,
                      gpus=gpus, pool_name=pool_name)
    except TemplateError as exc:
        raise Exit(str(exc), code=1) from None
    if out:
        Path(out).write_text(text, encoding="utf-8")
    else:
        print(text, end="")
