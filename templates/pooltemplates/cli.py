"""`pooltemplates list|validate|render` (also `python -m pooltemplates`): the templates from any shell.

The repository's `invoke template.*` tasks call the same functions. Every error is printed as
`error: ...` listing all problems, with exit code 2; warnings go to stderr.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from .errors import Problem, TemplateError, TemplateWarning
from .loading import load_template, packaged_templates, read_template
from .overrides import parse_assignments
from .schema import PoolTemplate
from .targets import TARGETS, render, target_parameters

OVERRIDE_HELP = "override a setting, e.g. executor.instances=4 (repeatable)"
TARGET_OPTIONS = {
    "image": "Kubernetes targets: container image (default: the trainstack image in --registry)",
    "registry": "Kubernetes targets: registry HOST[:PORT] holding the trainstack images (default: localhost:5000)",
    "namespace": "Kubernetes targets: namespace (default: default)",
    "job_name": "Kubernetes manifests: name of the job (raycluster: of the Ray cluster; default: the template's name)",
    "script": "Kubernetes manifests and slurm: training script and its arguments (default: an example in the image; "
              "slurm's host runtime: in the folder sbatch runs in, a checkout's examples/)",
    "service_account": "Spark on Kubernetes: the driver's service account "
                       "(default: spark; spark-application: spark-operator-spark)",
    "master": "kubernetes: Spark master (default: k8s://https://kubernetes.default.svc); Ray on Spark is not for "
              "k8s:// masters, Ray on Kubernetes is --target rayjob",
    "node_type": "databricks: worker node type",
    "driver_node_type": "databricks: driver node type (default: the worker's)",
    "spark_version": "databricks: runtime version",
    "runtime": "slurm: host (trainrun on the nodes), pyxis, apptainer or podman (default: host)",
    "launch": "slurm: spark (a Spark pool of the job's own, for every job kind; the default) or srun (MPI or "
              "torchrun ranks, no Spark)",
    "partition": "slurm: the partition (default: the cluster's)",
    "account": "slurm: the account to charge (default: yours)",
    "time": "slurm: the time limit (default: 01:00:00)",
}


def load_checked(name: str, assignments: list[str]) -> PoolTemplate:
    """The validated template with overrides applied; warnings are printed to stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TemplateWarning)
        template = load_template(name, parse_assignments(assignments))
    for warning in caught:
        print(f"warning: {warning.message}", file=sys.stderr)
    return template


def catalogue() -> str:
    """The packaged templates and the render targets with their parameters."""
    lines = ["templates:"]
    lines += [f"  {name}: {read_template(name).description}" for name in packaged_templates()]
    lines.append("targets:")
    lines += [f"  {target} (parameters: {', '.join(target_parameters(target)) or '-'})" for target in TARGETS]
    return "\n".join(lines) + "\n"


def render_checked(name: str, target: str, assignments: list[str], **parameters: str | None) -> str:
    return render(load_checked(name, assignments), target, **parameters)


def write_out(out: str, text: str) -> None:
    """`text` into the file `out`; TemplateError (one line, no traceback) where it cannot be written."""
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise TemplateError("--out", [Problem("--out", out, f"cannot be written ({exc.strerror})",
                                              "a file path in an existing, writable folder")]) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pooltemplates", description="Spark GPU pool templates.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the packaged templates and the render targets")
    validate = commands.add_parser("validate", help="check a template against every rule")
    rendering = commands.add_parser("render", help="render a validated template for a target")
    for command in (validate, rendering):
        command.add_argument("name", help="a packaged template or a .yaml path")
        command.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE",
                             help=OVERRIDE_HELP)
    rendering.add_argument("--target", required=True, choices=list(TARGETS))
    rendering.add_argument("--out", help="write here instead of stdout")
    for option, text in TARGET_OPTIONS.items():
        rendering.add_argument("--" + option.replace("_", "-"), dest=option, help=text)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            print(catalogue(), end="")
        elif args.command == "validate":
            load_checked(args.name, args.assignments)
            print(f"{args.name}: valid")
        else:
            parameters = {option: getattr(args, option) for option in TARGET_OPTIONS}
            text = render_checked(args.name, args.target, args.assignments, **parameters)
            if args.out:
                write_out(args.out, text)
            else:
                print(text, end="")
    except TemplateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
