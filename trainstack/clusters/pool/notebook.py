"""The pool's notebook (`pool.up --notebook`): a JupyterLab container of the pool's image that drives the pool,
its template file, its URL with the token, and the URL of MLflow's server beside it (`--mlflow`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import docker
import yaml
from docker.models.containers import Container

from trainrun.image_contract import MLFLOW_PORT
from trainstack.clusters.lab import lab_url, mlflow_url
from trainstack.errors import TrainstackError

from .specs import notebook_kwargs


def start_notebook(client: docker.DockerClient, plan: dict[str, Any], share: Path | None, spark_conf: Path,
                   timeout: float, progress: Callable[[str], None]) -> dict[str, str]:
    """Starts the plan's notebook container; returns its URL once JupyterLab serves (`notebook_url`), and MLflow's
    once it answers (`mlflow_url`) where the plan has it."""
    spec = plan["notebook"]
    # Beside the conf, in the pool's private directory that `pool.down` removes; the template holds no secret.
    template_file = spark_conf.parent / Path(spec["template_file"]["target"]).name
    template_file.write_text(yaml.safe_dump(spec["template_file"]["data"], sort_keys=False))
    template_file.chmod(0o644)
    container = client.containers.create(**notebook_kwargs(plan, share, spark_conf, template_file))
    container.start()
    progress(f"pool {plan['pool']}: started {spec['name']}")
    urls = {"notebook_url": lab_url(container, timeout=timeout)}
    if serves_mlflow(container):
        urls["mlflow_url"] = mlflow_url(container, timeout=timeout)
    return urls


def serves_mlflow(container: Container) -> bool:
    return f"{MLFLOW_PORT}/tcp" in container.attrs["HostConfig"]["PortBindings"]


def notebook_lines(container: Container) -> list[str]:
    """The status lines of a pool's notebook container: JupyterLab's, and MLflow's where it runs one."""
    try:
        lines = [f"notebook: {lab_url(container, timeout=0)} ({container.name})"]
    except TrainstackError:
        return [f"notebook: {container.name} is {container.status}, not serving (docker logs {container.name})"]
    if serves_mlflow(container):
        try:
            lines.append(f"mlflow: {mlflow_url(container, timeout=0)} ({container.name})")
        except TrainstackError:
            lines.append(f"mlflow: {container.name} does not answer (docker logs {container.name})")
    return lines
