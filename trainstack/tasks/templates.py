"""invoke tasks for pool templates: list, validate, render (the `template` collection), over pooltemplates.cli."""
from __future__ import annotations

from invoke import task

from pooltemplates.cli import OVERRIDE_HELP, TARGET_OPTIONS, catalogue, load_checked, render_checked, write_out
from pooltemplates.targets import TARGETS
from trainstack.console import reports_errors

NAME_HELP = "a packaged template or a .yaml path"


@task(name="list")
@reports_errors
def list_(c):
    """List the packaged templates and the render targets with their parameters."""
    print(catalogue(), end="")


@task(iterable=["set_"], help={"name": NAME_HELP, "set_": OVERRIDE_HELP})
@reports_errors
def validate(c, name, set_=None):
    """Check a template against every rule; exit 2 listing all errors."""
    load_checked(name, set_ or [])
    print(f"{name}: valid")


@task(
    name="render",
    iterable=["set_"],
    help={"name": NAME_HELP, "target": "one of " + ", ".join(TARGETS), "set_": OVERRIDE_HELP,
          "out": "write here instead of stdout", **TARGET_OPTIONS},
)
@reports_errors
def render_(c, name, target, set_=None, out=None, image=None, registry=None, namespace=None, job_name=None,
            script=None, service_account=None, master=None, node_type=None, driver_node_type=None,
            spark_version=None, runtime=None, partition=None, account=None, time=None, launch=None):
    """Render a validated template for a target (spark-submit, synapse, databricks, pytorchjob, ...)."""
    text = render_checked(name, target, set_ or [], image=image, registry=registry, namespace=namespace,
                          job_name=job_name, script=script, service_account=service_account, master=master,
                          node_type=node_type, driver_node_type=driver_node_type, spark_version=spark_version,
                          runtime=runtime, partition=partition, account=account, time=time, launch=launch)
    if out:
        write_out(out, text)
    else:
        print(text, end="")
