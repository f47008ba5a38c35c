"""Ray's facts and doctor checks: what a Ray cluster needs on this host, whether `trainrun ray` starts it
(trainrun.backends.ray) or Ray on Spark does in an executor. Placement is the other engines': `trainrun ray` starts
its nodes on this host, through srun (engines/slurm.py) or in Spark executors."""
from __future__ import annotations

import os
import shutil
import sys

from ..checks import Check, Facts

TOKEN_FILE = os.path.join("~", ".ray", "auth_token")
AUTH_MODE = "RAY_AUTH_MODE"
START_HOOK = "RAY_ON_SPARK_START_HOOK"


def ray_cli() -> str | None:
    """The `ray` a node starts: this Python environment's (Ray on Spark's executors take it from PATH)."""
    beside = os.path.join(os.path.dirname(sys.executable), "ray")
    return beside if os.access(beside, os.X_OK) else shutil.which("ray")


def token_file_exists() -> bool:
    return os.path.exists(os.path.expanduser(TOKEN_FILE))


def ray_checks(facts: Facts) -> list[Check]:
    """Where Ray is installed: `ray` on PATH for Ray on Spark's worker nodes, token authentication not turned off,
    and the token file that makes a Ray on Spark head and its worker nodes disagree."""
    version = facts.packages.get("ray")
    if not version:
        return []
    environ = facts.environ
    checks = []
    on_path = shutil.which("ray", path=environ.get("PATH")) if environ.get("PATH") else None
    if on_path:
        checks.append(Check("ray-cli", "ok", f"ray {version}: {on_path}"))
    else:
        checks.append(Check("ray-cli", "warn", f"ray {version} is installed but `ray` is not on PATH: Ray on Spark's "
                            "executors run `ray start` from PATH", f"add {os.path.dirname(sys.executable)} to PATH"))
    mode = environ.get(AUTH_MODE, "")
    if mode and mode.lower() != "token":
        checks.append(Check("ray-auth", "warn", f"{AUTH_MODE}={mode}: a Ray cluster without token authentication runs "
                            "the code of anyone who reaches its ports (ShadowRay, CVE-2023-48022)",
                            f"unset {AUTH_MODE}: trainrun ray and the images' Ray on Spark make a token per cluster"))
    elif not mode and facts.ray_token_file and START_HOOK not in environ:
        checks.append(Check("ray-auth", "warn", f"{TOKEN_FILE} exists and {AUTH_MODE} is unset: a Ray on Spark head "
                            "takes token mode from it and its worker nodes do not (InvalidAuthToken, 'Launch "
                            "Ray-on-Spark cluster failed')",
                            f"{AUTH_MODE}=token and RAY_AUTH_TOKEN on the driver and in spark.executorEnv, or "
                            "trainrun ray, which sets both"))
    else:
        checks.append(Check("ray-auth", "ok", "token authentication" + (" (the images' start hook makes a token per "
                                                                        "Ray on Spark cluster)"
                                                                        if START_HOOK in environ else "")))
    return checks
