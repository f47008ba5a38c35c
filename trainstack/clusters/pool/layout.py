"""The plan of a local Spark standalone pool: one master and N worker containers on a network.

The pool runner (`invoke pool.up`) creates exactly what the plan lists and labels it, so
`pool.down` can remove every container and network it made.
"""
from __future__ import annotations

import math
from typing import Any

from pooltemplates import PoolTemplate, Problem, TemplateError
from pooltemplates.loading import DISCOVERY_SCRIPT
from pooltemplates.structure import template_data
from pooltemplates.units import scale_size
from trainrun.backends.spark.pool_daemon import gpu_env
from trainrun.image_contract import JUPYTER_PORT, MLFLOW_PORT, NOTEBOOK_DIR, SPARK_WORKER_DIR
from trainrun.notebook.session import POOL_MASTER_ENV, POOL_TEMPLATE_ENV
from trainstack.clusters.containers import ClusterKind
from trainstack.image.naming import flavor_image

from .security import SPARK_CONF_DIR

POOL = ClusterKind("pool", "pool")
POOL_LABEL, POOL_ROLE_LABEL, POOL_SHARE_LABEL = POOL.label, POOL.role_label, POOL.share_label
# The host path of a pool's Spark conf, which holds its secret (security.py).
POOL_CONF_LABEL = POOL.sublabel("spark-conf")
MASTER_PORT = 7077
MASTER_UI_PORT = 8080
GPU_MODES = ("placeholder", "nvidia")
NOTEBOOK_PORT = JUPYTER_PORT
# Where the notebook container reads the pool's template (POOL_TEMPLATE_ENV of the trainrun.notebook extension).
POOL_TEMPLATE_DIR = "/etc/trainstack/pool-template"


def work_volume(pool_name: str) -> dict[str, Any]:
    """The pool's work folder: one docker volume, read-write at the image's work folder in the notebook, every
    worker and every job's driver, as DBFS or a Synapse mount is in theirs. A Store, checkpoints or data that
    executors write and the driver reads go there. Docker gives a new volume the image folder's owner, the
    image's user."""
    return {"name": f"{pool_name}-work", "target": NOTEBOOK_DIR, "labels": {POOL_LABEL: pool_name}}


def pool_layout(template: PoolTemplate, image: str | None = None, gpus: str = "placeholder",
                pool_name: str = "trainstack-pool", master_port: int = MASTER_PORT,
                ui_port: int = MASTER_UI_PORT, notebook_port: int | None = None,
                mlflow_port: int | None = None) -> dict[str, Any]:
    """The containers, network and URLs of a pool for `template`, as data. The master's ports are published
    on 127.0.0.1 at master_port and ui_port. `gpus`: 'placeholder' advertises fake GPU addresses; 'nvidia'
    hands real GPUs over. With `notebook_port`, a JupyterLab container is the pool's driver, published there; with
    `mlflow_port` too, MLflow's tracking server runs beside it, published there."""
    if gpus not in GPU_MODES:
        raise TemplateError(f"local pool for {template.name!r}", [Problem(
            "gpus", gpus, "is not a GPU mode", "one of " + ", ".join(GPU_MODES))])
    master_host = f"{pool_name}-master"
    network_master_url = f"spark://{master_host}:{MASTER_PORT}"
    return {
        "template": template.name,
        "pool": pool_name,
        "image": image or flavor_image("gpu" if gpus == "nvidia" else "cpu"),
        "gpus": gpus,
        "network": {"name": pool_name, "labels": {POOL_LABEL: pool_name}},
        "work_volume": work_volume(pool_name),
        "master": {
            "name": master_host,
            "hostname": master_host,
            "command": ["spark-class", "org.apache.spark.deploy.master.Master",
                        "--host", master_host, "--port", str(MASTER_PORT),
                        "--webui-port", str(MASTER_UI_PORT)],
            # Where the runner mounts the pool's conf (its secret): security.py.
            "environment": {"SPARK_CONF_DIR": SPARK_CONF_DIR},
            "mounts": [],
            "ports": [_published(MASTER_PORT, master_port), _published(MASTER_UI_PORT, ui_port)],
            "labels": {POOL_LABEL: pool_name, POOL_ROLE_LABEL: "master"},
        },
        "workers": [_worker(template, pool_name, index, network_master_url, gpus)
                    for index in range(template.nodes)],
        "notebook": None if notebook_port is None else _notebook(template, pool_name, network_master_url,
                                                                 notebook_port, mlflow_port),
        "master_url": {"host": f"spark://127.0.0.1:{master_port}", "network": network_master_url},
        "ui_url": f"http://127.0.0.1:{ui_port}",
        "spark_conf": template.spark_conf(),
    }


def _published(port: int, host_port: int) -> dict[str, Any]:
    return {"container": port, "host": host_port, "host_ip": "127.0.0.1"}


def _notebook(template: PoolTemplate, pool_name: str, master_url: str, port: int,
              mlflow_port: int | None) -> dict[str, Any]:
    """JupyterLab (the image's `lab` role) whose kernels drive the pool: the extension reads the master and the
    template from the environment; the runner writes `template_file` and mounts it at its target. With
    `mlflow_port`, the entrypoint starts MLflow's tracking server beside it (MLFLOW_PORT), on the runs of the store
    in the work volume, which the notebook, the workers and the jobs' drivers all see."""
    name = f"{pool_name}-notebook"
    template_path = f"{POOL_TEMPLATE_DIR}/{template.name}.yaml"  # its file name is the template's name
    environment = {"SPARK_CONF_DIR": SPARK_CONF_DIR, POOL_MASTER_ENV: master_url, POOL_TEMPLATE_ENV: template_path}
    ports = [_published(JUPYTER_PORT, port)]
    if mlflow_port is not None:
        environment["MLFLOW_PORT"] = str(MLFLOW_PORT)
        ports.append(_published(MLFLOW_PORT, mlflow_port))
    return {
        "name": name,
        # Executors reach the driver at its host name, the container's name on the pool network.
        "hostname": name,
        "command": ["lab"],
        "environment": environment,
        "mounts": [],
        "ports": ports,
        "labels": {POOL_LABEL: pool_name, POOL_ROLE_LABEL: "notebook"},
        "template_file": {"target": template_path, "data": template_data(template)},
    }


def _worker(template: PoolTemplate, pool_name: str, index: int, master_url: str,
            gpus: str) -> dict[str, Any]:
    name = f"{pool_name}-worker-{index + 1}"
    # Executors spread evenly; each worker offers room for its share of them.
    executors = math.ceil(template.executor.instances / template.nodes)
    command = ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    if template.executor.cores is not None:
        command += ["--cores", str(executors * template.executor.cores)]
    if template.executor.memory is not None:
        command += ["--memory", scale_size(template.executor.memory, executors)]
    command.append(master_url)
    worker: dict[str, Any] = {
        "name": name,
        "hostname": name,
        "command": command,
        "environment": {"SPARK_WORKER_DIR": SPARK_WORKER_DIR, "SPARK_CONF_DIR": SPARK_CONF_DIR},
        "mounts": [],
        "ports": [],
        "labels": {POOL_LABEL: pool_name, POOL_ROLE_LABEL: "worker"},
        "gpu_amount": 0,
    }
    if template.uses_gpus:
        worker_gpus = executors * template.gpu.per_executor
        worker["gpu_amount"] = worker_gpus
        script = template.gpu.discovery_script
        worker["environment"]["SPARK_WORKER_OPTS"] = (
            f"-Dspark.worker.resource.gpu.amount={worker_gpus} "
            f"-Dspark.worker.resource.gpu.discoveryScript={script}")
        # The runner bind-mounts pooltemplates.package_file(package_file) at target.
        worker["mounts"].append(
            {"package_file": DISCOVERY_SCRIPT, "target": script, "read_only": True})
        if gpus == "placeholder":
            worker["environment"].update(gpu_env(worker_gpus, index, placeholder=True))
        else:
            # Host GPU indices for the NVIDIA runtime; inside, the container sees them as 0..n-1.
            worker["gpu_device_ids"] = [str(index * worker_gpus + offset) for offset in range(worker_gpus)]
    return worker
