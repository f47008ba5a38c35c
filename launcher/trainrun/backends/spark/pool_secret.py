"""A Spark pool's shared secret: authentication and RPC encryption between its master, workers, executors and
drivers, what else a pool turns off (REST submission, the UIs' kill links), and the conf file that holds it, readable
by its owner alone: never in an environment variable, a command line or a log. The local pool of containers
(trainstack.clusters.pool.security) and a pool inside a Slurm allocation (allocation_pool) both use it."""
from __future__ import annotations

import os
from typing import Mapping


def security_conf(secret: str) -> dict[str, str]:
    return {
        "spark.authenticate": "true",
        "spark.authenticate.secret": secret,
        "spark.network.crypto.enabled": "true",
        # The master's REST server runs drivers for anyone who can reach port 6066, secret or not.
        "spark.master.rest.enabled": "false",
        "spark.ui.killEnabled": "false",
    }


def write_private_conf(path: str | os.PathLike, conf: Mapping[str, str]) -> None:
    """A new Spark conf file (spark-defaults.conf's format) of mode 0600; refused if the file exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.writelines(f"{key} {value}\n" for key, value in conf.items())
