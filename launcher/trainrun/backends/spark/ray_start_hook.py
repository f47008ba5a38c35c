"""The images' Ray on Spark start hook, which RAY_ON_SPARK_START_HOOK names in every image: the driver, the head and
every worker node get the same token authentication (ray_on_spark.authentication_env says why), and a driver that
ends without `shutdown_ray_cluster()`, its work done or failed, shuts the Ray cluster down instead of waiting forever
for Ray on Spark's threads (its job server, a Spark job for each worker node), which are not daemon threads."""
from __future__ import annotations

import os
import threading

from ray._raylet import Config
from ray.util.spark.start_hook_base import RayOnSparkStartHook

from .ray_on_spark import authentication_env


class TrainstackStartHook(RayOnSparkStartHook):
    # Ray 2.60 constructs a hook that RAY_ON_SPARK_START_HOOK names with no arguments, and its own with is_global.
    def __init__(self, is_global: bool = False):
        super().__init__(is_global)
        self._env = authentication_env(os.environ)
        if self._env:
            # The driver starts the head and connects with `ray.init()`: both read the mode from its environment,
            # and its Ray config, which `import ray` read before, again.
            os.environ.update(self._env)
            Config.initialize("")

    def custom_environment_variables(self) -> dict[str, str]:
        return dict(self._env)

    def on_cluster_created(self, ray_cluster_handler) -> None:
        # Python runs these at exit before it joins the threads that are not daemons (concurrent.futures' way);
        # a shutdown the user already made is not made again.
        threading._register_atexit(ray_cluster_handler.shutdown)
