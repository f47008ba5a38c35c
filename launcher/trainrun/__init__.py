"""trainrun: one launcher over mpirun, torch.distributed.run and Spark barrier jobs."""
from .errors import JobFailed, MissingBackend, TrainrunError, UnpicklableFunction, UsageError

__version__ = "0.1.0"
__all__ = ["run", "HorovodRunner", "JobFailed", "MissingBackend", "TrainrunError", "UnpicklableFunction",
           "UsageError", "__version__"]


def __getattr__(name: str):
    # Lazy so that `python -m trainrun.rank`, run once per rank, imports as little as possible.
    if name == "run":
        from .api import run

        return run
    if name == "HorovodRunner":
        from .api import HorovodRunner

        return HorovodRunner
    raise AttributeError(name)
