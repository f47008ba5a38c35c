"""`HorovodRunner(np).run(main, **kwargs)`: Databricks' HorovodRunner API over `trainrun.run(backend="horovod")`."""
from __future__ import annotations

from typing import Any, Callable

from .api import run
from .errors import UsageError

LOG_VERBOSITIES = ("all", "log_callback_only")


class HorovodRunner:
    """Runs a function on Horovod ranks and returns rank 0's return value, as `sparkdl.HorovodRunner` does.

    `np > 0` runs np processes: a Spark barrier stage when `spark` is given (a master URL, True or a
    SparkSession, as `trainrun.run` takes it), else on this host. `np < 0` runs -np processes on this
    host (HorovodRunner's local mode). `driver_log_verbosity` is accepted for compatibility: every
    rank's output is shown, as with "all".
    """

    def __init__(self, np: int, driver_log_verbosity: str = "all", spark: Any = None) -> None:
        if not isinstance(np, int) or isinstance(np, bool) or np == 0:
            raise UsageError("np", np, "N > 0 (N processes, on Spark when spark= is given, else on this host) "
                             "or -N (N processes on this host, HorovodRunner's local mode)")
        if np < 0 and spark is not None:
            raise UsageError("np", np, "N > 0 together with spark= (a negative np runs on this host)")
        if driver_log_verbosity not in LOG_VERBOSITIES:
            raise UsageError("driver_log_verbosity", driver_log_verbosity, " or ".join(map(repr, LOG_VERBOSITIES)))
        self.num_processes = abs(np)
        self.spark = spark

    def run(self, main: Callable[..., Any], **kwargs: Any) -> Any:
        """Run `main(**kwargs)` on every rank; returns rank 0's return value (raises JobFailed if a rank fails)."""
        return run(main, backend="horovod", num_processes=self.num_processes, spark=self.spark, kwargs=kwargs)
