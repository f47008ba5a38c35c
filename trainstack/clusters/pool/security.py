"""A pool's shared secret: Spark authentication and RPC encryption between its master, workers and
the drivers that `pool.submit` starts, and what else the pool turns off (REST submission, UI kill).

The secret lives in one Spark conf file on the host (a 0700 directory of its own, the file 0600 and
owned by the image's user, who reads it in the containers), bind-mounted read-only as
`SPARK_CONF_DIR/spark-defaults.conf` in every container: never in an environment variable, a
command line, a label or a log, which `docker inspect` and `ps` would show.
"""
from __future__ import annotations

import secrets
from pathlib import Path

from trainrun.backends.spark.pool_secret import security_conf, write_private_conf
from trainstack.clusters.containers import give_to_image_user, private_folder, remove_private_folder

SPARK_CONF_DIR = "/etc/trainstack/pool"
CONF_FILE = "spark-defaults.conf"
PREFIX = "trainstack-pool-"


def write_pool_conf(pool_name: str) -> Path:
    """A new secret in a new conf file; returns its host path."""
    path = private_folder(f"{PREFIX}{pool_name}-") / CONF_FILE
    write_private_conf(path, security_conf(secrets.token_hex(32)))
    give_to_image_user(path)
    return path


def remove_pool_conf(path: Path) -> None:
    """Removes the conf's private folder (with the pool's notebook template beside it)."""
    remove_private_folder(path.parent, PREFIX, CONF_FILE)


def conf_volume(path: Path) -> dict[str, dict[str, str]]:
    """The docker SDK `volumes` entry that shows the conf file to a container."""
    return {str(path): {"bind": f"{SPARK_CONF_DIR}/{CONF_FILE}", "mode": "ro"}}
