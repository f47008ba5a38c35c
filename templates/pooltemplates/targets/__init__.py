"""Render targets: each turns a validated template into what one platform reads (one module per target;
trainjob.py holds Kubeflow Trainer's two and kuberay.py KubeRay's, k8s.py what the Kubernetes targets share; slurm.py
an sbatch script; workload.py the image and the script every target runs, ray_sizes.py what the Ray targets need)."""
from __future__ import annotations

import inspect
from typing import Any, Callable

from ..errors import Problem, TemplateError
from ..schema import PoolTemplate
from . import (
    databricks,
    databricks_ray,
    kubernetes,
    kuberay,
    mpijob,
    pytorchjob,
    slurm,
    spark_application,
    spark_defaults,
    spark_submit,
    synapse,
    trainjob,
)

TARGETS: dict[str, Callable[..., str]] = {
    "spark-submit": spark_submit.render,
    "spark-defaults": spark_defaults.render,
    "synapse": synapse.render,
    "databricks": databricks.render,
    "databricks-ray": databricks_ray.render,
    "kubernetes": kubernetes.render,
    "spark-application": spark_application.render,
    "pytorchjob": pytorchjob.render,
    "mpijob": mpijob.render,
    "trainjob-torch": trainjob.render_torch,
    "trainjob-mpi": trainjob.render_mpi,
    "rayjob": kuberay.render_job,
    "raycluster": kuberay.render_cluster,
    "slurm": slurm.render,
}


def target_parameters(target: str) -> list[str]:
    """The optional parameters a target accepts (e.g. databricks: node_type)."""
    return [name for name in inspect.signature(TARGETS[target]).parameters if name != "template"]


def render(template: PoolTemplate, target: str, **parameters: Any) -> str:
    """The template rendered for `target`; parameters left as None take the target's default."""
    if target not in TARGETS:
        raise TemplateError("render", [Problem("target", target, "is not a render target",
                                               "one of " + ", ".join(TARGETS))])
    given = {name: value for name, value in parameters.items() if value is not None}
    accepted = target_parameters(target)
    unknown = [Problem(name, value, f"is not a parameter of target {target}",
                       ", ".join(accepted) or "no parameters")
               for name, value in given.items() if name not in accepted]
    if unknown:
        raise TemplateError(f"render {template.name!r} for {target}", unknown)
    return TARGETS[target](template, **given)
