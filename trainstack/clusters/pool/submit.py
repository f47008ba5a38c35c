"""A job's driver run in a container on the pool network, its output streamed here."""
from __future__ import annotations

import sys
import uuid
from typing import Sequence, TextIO

import docker
import docker.errors

from trainstack.clusters.containers import ClusterError
from trainstack.docker_client import connect, run_container

from .lookup import find_pool
from .plan import DEFAULT_POOL
from .specs import driver_kwargs

EXAMPLE = "-- trainrun spark --master spark://trainstack-pool-master:7077 --num-processes 2 -- train.py"


def submit(command: Sequence[str], name: str = DEFAULT_POOL, client: docker.DockerClient | None = None,
           out: TextIO = sys.stdout) -> int:
    """Run `command` in a container of the pool's image on the pool network; returns its exit code."""
    if not command:
        raise ClusterError.bad_option("command", "", "is missing", f"a command after `--`, e.g. {EXAMPLE}")
    client = client or connect()
    pool = find_pool(client, name)
    container_name = f"{name}-driver-{uuid.uuid4().hex[:8]}"
    create = driver_kwargs(name, pool.image, pool.network, list(command), container_name, pool.share,
                           pool.spark_conf)
    try:
        return run_container(client, create, out=out)[0]
    except docker.errors.NotFound:
        raise ClusterError(f"pool {name!r}: the driver container {container_name} was removed while the job ran "
                        "(`pool.down`?)") from None
