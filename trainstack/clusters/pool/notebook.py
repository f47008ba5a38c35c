"""The pool's notebook (`pool.up --notebook`): a JupyterLab container of the pool's image that drives the pool,
its template file, and its URL with the token."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import docker
import yaml
from docker.models.containers import Container

from trainstack.clusters.lab import lab_url
from trainstack.errors import TrainstackError

from .specs import notebook_kwargs


def start_notebook(client: docker.DockerClient, plan: dict[str, Any], share: Path | None, spark_conf: Path,
                   timeout: float, progress: Callable[[str], None]) -> str:
    """Starts the plan's notebook container; returns its URL once JupyterLab serves."""
    spec = plan["notebook"]
    # Beside the conf, in the pool's private directory that `pool.down` removes; the template holds no secret.
    template_file = spark_conf.parent / Path(spec["template_file"]["target"]).name
    template_file.write_text(yaml.safe_dump(spec["template_file"]["data"], sort_keys=False))
    template_file.chmod(0o644)
    container = client.containers.create(**notebook_kwargs(plan, share, spark_conf, template_file))
    container.start()
    progress(f"pool {plan['pool']}: started {spec['name']}")
    return lab_url(container, timeout=timeout)


def notebook_line(container: Container) -> str:
    """The status line of a pool's notebook container."""
    try:
        return f"notebook: {lab_url(container, timeout=0)} ({container.name})"
    except TrainstackError:
        return f"notebook: {container.name} is {container.status}, not serving (docker logs {container.name})"
