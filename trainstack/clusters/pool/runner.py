"""`up`, `status` and `down` of a local pool: the plan's network and containers through the docker SDK."""
from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any, Callable

import docker
import docker.errors

from trainrun.ports import pick_free_port
from trainstack.clusters.containers import ClusterError, network_kwargs, removed_on_failure
from trainstack.console import report
from trainstack.docker_client import connect, require_built_image, share_directory

from .layout import MASTER_PORT, MASTER_UI_PORT, POOL, POOL_CONF_LABEL
from .lookup import current_worker_addresses, find_pool, record_worker_addresses
from .master import MasterUnreachable, missing_for_ready, read_master_state, status_table
from .notebook import notebook_lines, start_notebook
from .plan import DEFAULT_POOL, pool_plan
from .security import remove_pool_conf, write_pool_conf
from .specs import container_kwargs, volume_kwargs


def up(template: str = "local-pool", workers: int = 2, image: str | None = None, gpus: str = "placeholder",
       name: str = DEFAULT_POOL, master_port: int = MASTER_PORT, ui_port: int = MASTER_UI_PORT,
       share: str | None = None, timeout: float = 180.0, notebook_port: int | None = None,
       mlflow_port: int | None = None, client: docker.DockerClient | None = None,
       progress: Callable[[str], None] = report) -> dict[str, Any]:
    """Start the pool and wait until every worker is ALIVE with its GPUs; with `notebook_port`, then a JupyterLab
    container that drives the pool, published there, until it serves, and with `mlflow_port` MLflow's tracking
    server in it, published there, until it answers. Returns the plan, with the notebook's URL (token included) as
    `notebook_url` and MLflow's as `mlflow_url`.

    On any failure (or Ctrl-C) removes everything it created before raising. `progress` gets a line per step.
    """
    plan = pool_plan(template, workers, image, gpus, name, master_port, ui_port, notebook_port, mlflow_port)
    share_dir = share_directory(share, ClusterError.bad_option)
    client = client or connect()
    require_built_image(client, plan["image"], ClusterError.bad_option)
    POOL.refuse_if_up(client, name)
    _check_port_free("--master-port", master_port)
    _check_port_free("--ui-port", ui_port)
    if notebook_port is not None:
        _check_port_free("--notebook-port", notebook_port)
    if mlflow_port is not None:
        _check_port_free("--mlflow-port", mlflow_port)
    spark_conf = write_pool_conf(name)

    def remove() -> None:
        _remove(client, name)
        remove_pool_conf(spark_conf)

    with removed_on_failure(remove, lambda err: _docker_failure(err, plan)):
        client.networks.create(**network_kwargs(plan))
        client.volumes.create(**volume_kwargs(plan))
        for spec in (plan["master"], *plan["workers"]):
            create = container_kwargs(plan, spec, share_dir, spark_conf=spark_conf)
            client.containers.create(**create).start()
            progress(f"pool {name}: started {spec['name']}")
        _wait_until_ready(client, plan, timeout, progress)
        workers = [client.containers.get(spec["name"]) for spec in plan["workers"]]
        record_worker_addresses(spark_conf, current_worker_addresses(workers, plan["network"]["name"]))
        if plan["notebook"] is not None:
            plan = {**plan, **start_notebook(client, plan, share_dir, spark_conf, timeout, progress)}
    return plan


def status(name: str = DEFAULT_POOL, client: docker.DockerClient | None = None) -> str:
    """The pool's master URLs and a table of its workers as the master reports them."""
    pool = find_pool(client or connect(), name)
    try:
        state = read_master_state(pool.ui_url)
    except MasterUnreachable as err:
        raise ClusterError(f"pool {name!r}: the master does not answer: {err}") from None
    lines = [
        f"pool {name}: image {pool.image}, network {pool.network}, UI {pool.ui_url}",
        f"master: {pool.master_url} (host), {pool.network_master_url} (pool network)",
        f"host driver: --conf spark.driver.host={pool.gateway} --conf spark.driver.bindAddress={pool.gateway}"
        + (f" with SPARK_CONF_DIR={pool.spark_conf.parent} (the pool's secret)" if pool.spark_conf else ""),
        "",
        status_table(state, pool.worker_names_by_ip()),
    ]
    if pool.notebook is not None:
        lines[3:3] = notebook_lines(pool.notebook)
    stopped = [f"{worker.name} ({worker.status})" for worker in pool.workers if worker.status != "running"]
    if stopped:
        lines.append("containers not running: " + ", ".join(stopped))
    return "\n".join(lines)


def down(name: str = DEFAULT_POOL, client: docker.DockerClient | None = None) -> list[str]:
    """Remove every container, network and volume labelled with the pool's name; returns their names."""
    return _remove(client or connect(), name)


def _remove(client: docker.DockerClient, name: str) -> list[str]:
    containers = POOL.containers(client, name)
    removed = POOL.remove(client, name)
    # Every container of a pool names the same conf file.
    for spark_conf in {container.labels[POOL_CONF_LABEL] for container in containers
                       if POOL_CONF_LABEL in container.labels}:
        remove_pool_conf(Path(spark_conf))
    return removed


def _check_port_free(option: str, port: int) -> None:
    with socket.socket() as probe:
        # Lingering TIME_WAIT connections of a pool just removed do not make the port taken.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise ClusterError.bad_option(option, port, "is already in use on 127.0.0.1",
                                          f"a free port, e.g. {pick_free_port('127.0.0.1')}") from None


def _wait_until_ready(client: docker.DockerClient, plan: dict[str, Any], timeout: float,
                      progress: Callable[[str], None]) -> None:
    workers = len(plan["workers"])
    gpus = min(worker["gpu_amount"] for worker in plan["workers"])
    deadline = time.monotonic() + timeout
    missing, reported = "the master has not answered", None
    while time.monotonic() < deadline:
        POOL.check_none_exited(client, plan["pool"])
        try:
            missing = missing_for_ready(read_master_state(plan["ui_url"]), workers, gpus)
        except MasterUnreachable:
            missing = "the master has not answered yet"
        if missing is None:
            progress(f"pool {plan['pool']}: {workers} workers ALIVE")
            return
        if missing != reported:
            progress(f"pool {plan['pool']}: waiting: {missing}")
            reported = missing
        time.sleep(1)
    raise ClusterError(f"pool {plan['pool']!r} not ready after {timeout:.0f}s: {missing}; removed it.\n"
                       f"{POOL.log_tails(client, plan['pool'])}")


def _docker_failure(err: docker.errors.APIError, plan: dict[str, Any]) -> ClusterError:
    text = str(err.explanation or err)
    if "port is already allocated" in text or "address already in use" in text:
        ports = ", ".join(str(port["host"]) for port in plan["master"]["ports"])
        return ClusterError.bad_option("--master-port/--ui-port", ports, f"cannot be published ({text})",
                                       "ports free on 127.0.0.1")
    if "could not select device driver" in text:
        return ClusterError.bad_option("--gpus", plan["gpus"], f"needs the NVIDIA container runtime ({text})",
                                       "placeholder on machines without it")
    return ClusterError(f"pool {plan['pool']!r}: docker failed: {text}; removed the pool")
