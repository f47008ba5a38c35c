"""A job's driver run in a container on the pool network, its output streamed here."""
from __future__ import annotations

import codecs
import sys
import uuid
from typing import Sequence, TextIO

import docker
import docker.errors

from .errors import PoolError
from .lookup import docker_client, find_pool
from .plan import DEFAULT_POOL
from .specs import driver_kwargs

EXAMPLE = "-- trainrun spark --master spark://trainstack-pool-master:7077 --num-processes 2 -- train.py"


def submit(command: Sequence[str], name: str = DEFAULT_POOL, client: docker.DockerClient | None = None,
           out: TextIO = sys.stdout) -> int:
    """Run `command` in a container of the pool's image on the pool network; returns its exit code."""
    if not command:
        raise PoolError.bad_option("command", "", "is missing", f"a command after `--`, e.g. {EXAMPLE}")
    client = client or docker_client()
    pool = find_pool(client, name)
    container_name = f"{name}-driver-{uuid.uuid4().hex[:8]}"
    container = client.containers.create(**driver_kwargs(
        name, pool.image, pool.network, list(command), container_name, pool.share))
    try:
        container.start()
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        for chunk in container.logs(stream=True, follow=True):
            out.write(decoder.decode(chunk))
            out.flush()
        return container.wait()["StatusCode"]
    except docker.errors.NotFound:
        raise PoolError(f"pool {name!r}: the driver container {container_name} was removed while the job ran "
                        "(`pool.down`?)") from None
    finally:
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass  # `pool.down` from elsewhere removed it first
