"""The local-pool plan of a template, checked as the pool runner's options before any docker call."""
from __future__ import annotations

import dataclasses
from typing import Any

from pooltemplates import TemplateError, load_template
from trainstack.clusters.containers import ClusterError

from .layout import GPU_MODES, MASTER_PORT, MASTER_UI_PORT, POOL, pool_layout

DEFAULT_POOL = "trainstack-pool"
# Template fields the runner's options set, named as the options in errors.
_OPTIONS = {"template": "--template", "nodes": "--workers", "executor.instances": "--workers"}


def pool_plan(template: str = "local-pool", workers: int = 2, image: str | None = None,
              gpus: str = "placeholder", name: str = DEFAULT_POOL, master_port: int = MASTER_PORT,
              ui_port: int = MASTER_UI_PORT, notebook_port: int | None = None,
              mlflow_port: int | None = None) -> dict[str, Any]:
    """The pool layout of a template for these options (with a notebook when `notebook_port` is given, and MLflow's
    server in it when `mlflow_port` is too); raises ClusterError or TemplateError on bad input."""
    if workers < 1:
        raise ClusterError.bad_option("--workers", workers, "must be at least 1", "a whole number >= 1")
    if gpus not in GPU_MODES:
        raise ClusterError.bad_option("--gpus", gpus, "is not a GPU mode", " or ".join(GPU_MODES))
    POOL.check_name(name)
    ports = {"--master-port": master_port, "--ui-port": ui_port}
    if notebook_port is not None:
        ports["--notebook-port"] = notebook_port
    if mlflow_port is not None:
        if notebook_port is None:
            raise ClusterError.bad_option("--mlflow-port", mlflow_port, "needs the notebook, whose container runs "
                                          "MLflow's server", "--notebook with it")
        ports["--mlflow-port"] = mlflow_port
    for option, port in ports.items():
        if not 1 <= port <= 65535:
            raise ClusterError.bad_option(option, port, "is not a TCP port", "1 to 65535")
    for index, (option, port) in enumerate(ports.items()):
        earlier = [other for other, taken in list(ports.items())[:index] if taken == port]
        if earlier:
            raise ClusterError.bad_option(option, port, f"is the same port as {earlier[0]}",
                                          f"a port other than {earlier[0]}")
    try:
        loaded = load_template(template, {"nodes": str(workers), "executor.instances": str(workers)})
    except TemplateError as err:
        raise TemplateError(err.subject, [dataclasses.replace(problem, field=_OPTIONS.get(problem.field, problem.field))
                                          for problem in err.problems]) from None
    return pool_layout(loaded, image, gpus, name, master_port, ui_port, notebook_port, mlflow_port)
