"""The images' Ray on Spark start hook, which RAY_ON_SPARK_START_HOOK names in every image: the driver, the head and
every worker node get the same token authentication (ray_on_spark.authentication_env says why); the nodes get the
interface of the driver's default route for Gloo and NCCL (torch otherwise takes the address the host name resolves
to, often loopback: Databricks' own hook sets GLOO_SOCKET_IFNAME for it) unless the user set them, and the driver's
drain timeout, else none; a /dev/shm too small for the object store is named in one line; and a driver that ends
without `shutdown_ray_cluster()`, its work done or failed, shuts the Ray cluster down instead of waiting forever for
Ray on Spark's threads (its job server, a Spark job for each worker node), which are not daemon threads.

It has the methods Ray 2.60 calls on a start hook (ray.util.spark.start_hook_base.RayOnSparkStartHook's) rather than
that base class, so that trainrun imports without Ray (the image test runs it under the matrix's Ray)."""
from __future__ import annotations

import os
import socket
import sys
import threading

from ...machine import default_route_interface
from ..ray.node import DRAIN_TIMEOUT, interface_variables, small_shm_line
from .ray_on_spark import authentication_env


class TrainstackStartHook:
    # Ray 2.60 constructs a hook that RAY_ON_SPARK_START_HOOK names with no arguments, and again for each worker
    # node's Spark job.
    def __init__(self, is_global: bool = False):
        self.is_global = is_global
        self._env = authentication_env(os.environ)
        if any(os.environ.get(name) != value for name, value in self._env.items()):
            # The driver starts the head and connects with `ray.init()`: both read the mode from its environment,
            # and from its Ray config, which `import ray` read before.
            from ray._raylet import Config

            os.environ.update(self._env)
            Config.initialize("")

    def custom_environment_variables(self) -> dict[str, str]:
        # shutdown_ray_cluster() ends the nodes with SIGTERM, on which Ray waits up to 30 s for Serve to drain; a
        # timeout the driver has reaches the worker nodes too, whose environment is the executors'.
        return {**self._env, **interface_variables(default_route_interface(), os.environ),
                DRAIN_TIMEOUT: os.environ.get(DRAIN_TIMEOUT, "0")}

    def get_default_temp_root_dir(self) -> str:
        return "/tmp"

    def on_ray_dashboard_created(self, port: int) -> None:
        pass

    def on_cluster_created(self, ray_cluster_handler) -> None:
        shm_line = small_shm_line(socket.gethostname())
        if shm_line:
            print(f"trainstack: warning: {shm_line}", file=sys.stderr, flush=True)
        # Python runs these at exit before it joins the threads that are not daemons (concurrent.futures' way);
        # a shutdown the user already made is not made again.
        threading._register_atexit(ray_cluster_handler.shutdown)

    def on_spark_job_created(self, job_group_id: str) -> None:
        pass
