"""The Python API over the same planners and runner: `trainrun.run(fn_or_script, *args, ...)`, and
`HorovodRunner(np).run(main, **kwargs)`, Databricks' HorovodRunner over `run(backend="horovod")`."""
from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import Any, Callable, Mapping

from .backends import plan_job
from .errors import UsageError
from .job import MpiJob, SparkJob, TorchJob
from .machine import detect_machine
from .payload import pickle_payload
from .plan import DEFAULT_EXIT_BARRIER_TIMEOUT, Plan, RunOptions
from .program import Program
from .runner import run_plan
from .validate import timeout as checked_timeout

API_BACKENDS = ("torch", "horovod")
LOG_VERBOSITIES = ("all", "log_callback_only")


def run(main: Callable[..., Any] | str, *args: Any, backend: str = "torch", num_processes: int = 1,
        use_gpu: bool = False, spark: Any = None, timeout: float | None = None,
        kwargs: Mapping[str, Any] | None = None, exit_barrier_timeout: float = DEFAULT_EXIT_BARRIER_TIMEOUT) -> Any:
    """Run `main(*args, **kwargs)` on `num_processes` ranks and return rank 0's return value.

    `main` is a function (cloudpickled; do its imports inside it) or the path of a script, whose
    `args` are then its command-line arguments and which returns None. `backend` is "torch"
    (torchrun) or "horovod" (mpirun, or Horovod's Gloo controller where there is no MPI).
    `spark`: None runs on this host; a master URL or True (default master) runs a Spark barrier
    stage; a SparkSession runs the barrier stage in that session.
    Once a rank has returned, the others have `exit_barrier_timeout` seconds to return too before the job
    is stopped (JobFailed, exit code 124, naming them).
    Raises JobFailed naming the failed rank and its exit code (or the signal that killed it), and
    UnpicklableFunction (before any rank starts) naming what in `main` or its arguments cannot be pickled.
    """
    if backend not in API_BACKENDS:
        raise UsageError("backend", backend, valid=" or ".join(repr(b) for b in API_BACKENDS))
    if timeout is not None:
        timeout = checked_timeout("timeout", timeout)
    exit_barrier_timeout = checked_timeout("exit_barrier_timeout", exit_barrier_timeout)
    with tempfile.TemporaryDirectory(prefix="trainrun-api-") as workdir:
        result_path = os.path.join(workdir, "result.pkl")
        program = _program(main, args, dict(kwargs or {}), workdir, result_path)
        session = spark if spark is not None and not isinstance(spark, (str, bool)) else None
        machine = detect_machine("spark" if spark or session is not None else backend)
        options = RunOptions(timeout=timeout, exit_barrier_timeout=exit_barrier_timeout)
        if spark or session is not None:
            job = SparkJob(num_processes=num_processes, program=program,
                           master=spark if isinstance(spark, str) else None, use_gpu=use_gpu, framework=backend,
                           session=session, run=options)
        elif backend == "torch":
            job = TorchJob(nproc_per_node=num_processes, program=program, run=options)
        else:
            job = MpiJob(num_processes=num_processes, program=program, gloo=machine.mpi_flavor is None, run=options)
        run_plan(plan_job(job, machine), owned_dirs=(workdir,))
        return _rank_0_result(program, result_path)


def run_in_job(job: MpiJob | TorchJob | SparkJob, backend: str, main: Callable[..., Any], args: tuple = (),
               kwargs: Mapping[str, Any] | None = None, before_run: Callable[[Plan], None] | None = None) -> Any:
    """Run `main(*args, **kwargs)` as the program of `job`, a job of `backend` built from trainrun's own options
    (as `%%trainrun` builds it, with its timeouts and output options in job.run), and return rank 0's return
    value; raises as `run` does. `before_run` gets the plan that runs, before it starts (the magic prints what the
    CLI says before a job)."""
    with tempfile.TemporaryDirectory(prefix="trainrun-api-") as workdir:
        result_path = os.path.join(workdir, "result.pkl")
        program = _program(main, args, dict(kwargs or {}), workdir, result_path)
        plan = plan_job(dataclasses.replace(job, program=program), detect_machine(backend))
        if before_run is not None:
            before_run(plan)
        run_plan(plan, owned_dirs=(workdir,))
        return _rank_0_result(program, result_path)


def _program(main: Callable[..., Any] | str, args: tuple, kwargs: dict[str, Any], workdir: str,
             result_path: str) -> Program:
    if isinstance(main, str):
        if kwargs:
            raise UsageError("kwargs", kwargs, valid="none for a script: pass its command-line arguments as args")
        return Program("script", main, tuple(str(a) for a in args))
    if not callable(main):
        raise UsageError("main", main, valid="a function or the path of a Python script")
    payload = pickle_payload(main, args, kwargs)
    payload_path = os.path.join(workdir, "payload.pkl")
    with open(payload_path, "wb") as f:
        f.write(payload)
    return Program("payload", payload_path, (result_path,))


def _rank_0_result(program: Program, result_path: str) -> Any:
    if program.kind != "payload" or not os.path.exists(result_path):
        return None
    with open(result_path, "rb") as f:
        return _load(f.read())


def _load(data: bytes) -> Any:
    import cloudpickle

    return cloudpickle.loads(data)


class HorovodRunner:
    """Runs a function on Horovod ranks and returns rank 0's return value, as `sparkdl.HorovodRunner` does.

    `np > 0` runs np processes: a Spark barrier stage when `spark` is given (a master URL, True or a
    SparkSession, as `trainrun.run` takes it), else on this host. `np < 0` runs -np processes on this
    host (HorovodRunner's local mode). `driver_log_verbosity` is accepted for compatibility: every
    rank's output is shown, as with "all".
    """

    def __init__(self, np: int, driver_log_verbosity: str = "all", spark: Any = None) -> None:
        if not isinstance(np, int) or isinstance(np, bool) or np == 0:
            raise UsageError("np", np, valid="N > 0 (N processes, on Spark when spark= is given, else on this host) "
                             "or -N (N processes on this host, HorovodRunner's local mode)")
        if np < 0 and spark is not None:
            raise UsageError("np", np, valid="N > 0 together with spark= (a negative np runs on this host)")
        if driver_log_verbosity not in LOG_VERBOSITIES:
            raise UsageError("driver_log_verbosity", driver_log_verbosity,
                             valid=" or ".join(map(repr, LOG_VERBOSITIES)))
        self.num_processes = abs(np)
        self.spark = spark

    def run(self, main: Callable[..., Any], **kwargs: Any) -> Any:
        """Run `main(**kwargs)` on every rank; returns rank 0's return value (raises JobFailed if a rank fails)."""
        return run(main, backend="horovod", num_processes=self.num_processes, spark=self.spark, kwargs=kwargs)
