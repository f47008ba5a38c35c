"""invoke tasks for the local Spark pool of containers: up, status, submit, down (the `pool` collection)."""
from __future__ import annotations

import shlex
import sys

from invoke import task
from invoke.exceptions import Exit

from trainrun.image_contract import MLFLOW_PORT, MLFLOW_STORE
from trainstack.clusters import pool
from trainstack.console import reports_errors
from trainstack.errors import whole_number
from trainstack.clusters.pool.layout import MASTER_PORT, MASTER_UI_PORT, NOTEBOOK_PORT

NAME_HELP = f"pool name, the prefix of its containers and network (default {pool.DEFAULT_POOL})"


@task(help={
    "template": "a packaged template or a .yaml path (default local-pool)",
    "workers": "worker containers, one executor each (default 2)",
    "image": "image of every container (default trainstack:cpu, or trainstack:gpu with --gpus nvidia)",
    "gpus": "placeholder (GPU addresses without GPUs) or nvidia (real GPUs through the NVIDIA runtime)",
    "name": NAME_HELP,
    "master-port": f"host port on 127.0.0.1 for the master (default {MASTER_PORT})",
    "ui-port": f"host port on 127.0.0.1 for the master web UI (default {MASTER_UI_PORT})",
    "share": "a directory mounted read-only at /job in every container, e.g. your training scripts",
    "timeout": "seconds to wait for every worker to register, and for the notebook to serve (default 180)",
    "notebook": "also run JupyterLab as the pool's driver (its kernels' `spark` uses the pool); prints its URL",
    "notebook-port": f"host port on 127.0.0.1 for the notebook (default {NOTEBOOK_PORT})",
    "mlflow": "with --notebook: also run MLflow's tracking server in the notebook's container, on the runs of "
              f"{MLFLOW_STORE} in the pool's work volume; prints its URL",
    "mlflow-port": f"host port on 127.0.0.1 for MLflow's server (default {MLFLOW_PORT})",
})
@reports_errors
def up(c, template="local-pool", workers="2", image=None, gpus="placeholder", name=pool.DEFAULT_POOL,
       master_port=str(MASTER_PORT), ui_port=str(MASTER_UI_PORT), share=None, timeout="180", notebook=False,
       notebook_port=str(NOTEBOOK_PORT), mlflow=False, mlflow_port=str(MLFLOW_PORT)):
    """Start a Spark standalone master and workers in containers; wait until all are ALIVE with their GPUs."""
    pool.up(template, whole_number("--workers", workers, minimum=0), image, gpus, name,
            whole_number("--master-port", master_port), whole_number("--ui-port", ui_port), share,
            whole_number("--timeout", timeout),
            whole_number("--notebook-port", notebook_port) if notebook else None,
            whole_number("--mlflow-port", mlflow_port) if mlflow else None)
    print(pool.status(name))


@task(help={"name": NAME_HELP})
@reports_errors
def status(c, name=pool.DEFAULT_POOL):
    """Print the pool's master URLs and its workers: state, cores, memory, GPUs."""
    print(pool.status(name))


@task(help={"name": NAME_HELP})
@reports_errors
def submit(c, name=pool.DEFAULT_POOL):
    """Run the command after `--` as a driver in a container on the pool network (cwd: the --share dir)."""
    code = pool.submit(shlex.split(c.remainder), name)
    if code:
        raise Exit(code=code)


@task(help={"name": NAME_HELP})
@reports_errors
def down(c, name=pool.DEFAULT_POOL):
    """Remove every container and the network of the pool (found by label, from any shell)."""
    removed = pool.down(name)
    print(f"removed {', '.join(removed)}" if removed else f"no pool {name!r} to remove", file=sys.stderr)
