"""invoke tasks for the version matrix: `invoke matrix` prints the flavors, `invoke matrix.outdated` what each pin
could move to on PyPI and which rules hold it back."""
from __future__ import annotations

from invoke import task

from trainstack.console import reports_errors


@task(default=True, help={"gpu": "show only GPU flavors"})
@reports_errors
def show(c, gpu=False):
    """Print every flavor of images/matrix.yaml with its component versions."""
    from trainstack.image.docs import flavor_table
    from trainstack.image.matrix import load_matrix

    print(flavor_table(load_matrix(), gpu_only=gpu))


@task(help={"flavor": "one flavor by name (default: every flavor)", "json": "print the rows as JSON"})
@reports_errors
def outdated(c, flavor=None, json=False):
    """Print each pin's newest version on PyPI and the matrix rules that hold it back, per flavor.

    The pins are the flavor's components and python_packages that are PyPI distributions; a rule holds a pin back
    when `invoke build --set KEY=NEWEST` would break it ("nothing: a bump" when none would). PyPI is asked only
    when this task runs; a package it gives no version of gets a row saying why.
    """
    from trainstack.image.matrix import load_matrix
    from trainstack.image.outdated import drift, drift_json, drift_table

    image_matrix = load_matrix()
    flavors = [image_matrix.flavor(flavor)] if flavor is not None else list(image_matrix.flavors.values())
    rows = drift(flavors, image_matrix.rules)
    print(drift_json(rows) if json else drift_table(rows))
