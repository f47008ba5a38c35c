"""The Spark driver of `trainrun spark`: one barrier stage of N tasks, rank output streamed back.

Run as `python -m trainrun.backends.spark.driver --master URL --num-processes N --framework torch|horovod
--use-gpu|--no-gpu [--conf K=V ...] [--max-restarts N] -- RANK_ARGS` (the plan's argv), or in-process through
`run_in_session` when `trainrun.run` is given a SparkSession (a plan's stage, BarrierStage.run).
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ...errors import JobFailed, TrainrunError
from ...lifecycle import Lifecycle, Stop
from ...plan import RunOptions
from ...proctree import JOB_ID
from ...program import Program, program_from_rank_args
from ...rank.status import STATUS_DIR, RankExit, write_record, write_start
from ...validate import key_value
from . import STAGE, BarrierStage
from .output import LOOPBACK, OutputServer, is_local_master
from .stage_failure import describe_stage_failure, out_of_slots
from .task import TaskConfig, run_barrier_task

POLL_SECONDS = 0.2
QUIET_LOG4J2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2-quiet.properties")


def run_barrier_job(stage: BarrierStage, exit_barrier_timeout: float | None = None,
                    timeout: float | None = None, stopping: Callable[[], bool] = lambda: False) -> bytes | None:
    """Run the barrier stage; returns rank 0's pickled result for a function payload, else None.

    Each rank's start and end reach the driver through the output channel, as the rank records of
    trainrun.rank.status; under `trainrun spark` they are also written to $TRAINRUN_STATUS_DIR for trainrun's
    runner, which applies the exit barrier and --timeout. In a caller's own SparkSession (trainrun.run(spark=
    session)) there is no runner: with `exit_barrier_timeout` (and `timeout`) the driver applies them itself
    through the same trainrun.lifecycle, cancelling the stage.

    A stage that fails runs again, up to `stage.max_restarts` times, as torchrun's --max-restarts restarts its
    group: Spark itself never retries a failed barrier result stage. Spark starts it once there is a task slot for
    every rank again (`spark.scheduler.barrier.maxConcurrentTasksCheck.*`). Not after `stopping()`, a stop by the
    lifecycle or Spark's giving up on the slots.
    """
    payload = None
    if stage.program.kind == "payload":
        with open(stage.program.target, "rb") as f:
            payload = f.read()
    job_id = os.environ.get(JOB_ID) or uuid.uuid4().hex
    lifecycle = Lifecycle(stage.num_processes, STAGE, timeout,
                          math.inf if exit_barrier_timeout is None else exit_barrier_timeout, time.monotonic())
    restart = 0
    while True:
        attempt = StageAttempt(stage, job_id, payload, restart, lifecycle,
                               watched=exit_barrier_timeout is not None or timeout is not None)
        try:
            return attempt.run()
        except AttemptFailed as failed:
            if failed.final or restart == stage.max_restarts or stopping():
                raise failed.error from None
            restart += 1
            print(f"trainrun: {failed.cause}; the Spark stage starts again once every rank has a task slot (restart "
                  f"{restart} of {stage.max_restarts})", file=sys.stderr, flush=True)


class AttemptFailed(Exception):
    """One run of the stage failed: `error` is what the job reports if it is not run again, `cause` the failure in
    words, `final` whether running it again cannot help (a stop, Spark out of slots)."""

    def __init__(self, error: JobFailed, cause: str, final: bool) -> None:
        super().__init__(cause)
        self.error, self.cause, self.final = error, cause, final


@dataclass
class StageAttempt:
    """One run of the barrier stage, `restart` runs after the first, with its own output server and job group."""

    stage: BarrierStage
    job_id: str
    payload: bytes | None
    restart: int
    lifecycle: Lifecycle
    watched: bool

    def run(self) -> bytes | None:
        stage = self.stage
        sc = stage.session.sparkContext
        group = f"trainrun-{self.job_id}-{self.restart}"
        status_dir = os.environ.get(STATUS_DIR)
        host = LOOPBACK if is_local_master(sc.master) else sc.getConf().get("spark.driver.host")
        last = self.restart == stage.max_restarts
        # The first failing rank cancels the stage at once, instead of Spark retrying the barrier stage.
        server = OutputServer(host, lambda failure: sc.cancelJobGroup(group),
                              on_event=_status_writer(status_dir, failures=last)
                              if status_dir and os.path.isdir(status_dir) else None)
        config = TaskConfig(stage.num_processes, stage.program, stage.framework, stage.use_gpu, server.address,
                            self.payload, stage.ranks_filter, token=server.token, job_id=self.job_id,
                            rank_cwd=stage.rank_cwd, restart_count=self.restart, max_restarts=stage.max_restarts)
        watch = StageWatch(server, self.lifecycle, lambda: sc.cancelJobGroup(group)) if self.watched else None
        sc.setJobGroup(group, "trainrun barrier job", interruptOnCancel=True)
        try:
            results = (sc.parallelize(range(stage.num_processes), stage.num_processes).barrier()
                       .mapPartitions(lambda partition: run_barrier_task(config, partition)).collect())
        except Exception as err:
            raise self._failure(str(err), server, watch) from None
        finally:
            if watch is not None:
                watch.close()
            server.close()
        return next((r for r in results if r is not None), None)

    def _failure(self, error_text: str, server: OutputServer, watch: StageWatch | None) -> AttemptFailed:
        reported = _wait_for_reported_failure(server)
        failed = self.lifecycle.reported_end(server.status(), watch.stop if watch else None)
        if failed is not None:
            stopped = watch is not None and watch.stop is not None
            return AttemptFailed(failed, reported.describe() if reported else str(failed), final=stopped)
        remote_hosts = {rank: host for rank, host in server.hosts.items() if host != LOOPBACK}
        cause = describe_stage_failure(error_text, remote_hosts)
        return AttemptFailed(JobFailed(1, cause), cause, final=out_of_slots(error_text))


def _status_writer(status_dir: str, failures: bool):
    """Rank records for trainrun's runner, as the ranks themselves write them under the other backends; a failed
    rank's only when `failures` (the stage's last run: a run that restarts is not the job's end)."""
    def write(kind: str, rank: int, ended: RankExit | None) -> None:
        try:
            if kind == "start":
                write_start(status_dir, rank, 0)
            elif ended is not None and (failures or not ended.failed):
                write_record(status_dir, rank, ended.exit_code, ended.signal, at=ended.time)
        except OSError:
            pass

    return write


class StageWatch:
    """trainrun.lifecycle over the starts and ends the output server has received, for a barrier stage that runs
    without trainrun's runner: a stop with a reason cancels the stage. A stop without one (every rank exited 0
    and the stage has not ended) cancels nothing: Spark ends the stage, and rank 0's result is in it."""

    def __init__(self, server: OutputServer, lifecycle: Lifecycle, cancel: Callable[[], None]) -> None:
        self.stop: Stop | None = None
        self._server, self._lifecycle, self._cancel = server, lifecycle, cancel
        self._done = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while not self._done.wait(POLL_SECONDS):
            stop = self._lifecycle.check(time.monotonic(), time.time(), self._server.status())
            if stop is not None and stop.error is not None:
                self.stop = stop
                self._cancel()
                return

    def close(self) -> None:
        self._done.set()


def _wait_for_reported_failure(server: OutputServer, seconds: float = 2.0) -> RankExit | None:
    deadline = time.monotonic() + seconds
    while server.failure is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return server.failure


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    cut = list(argv).index("--")
    parser = argparse.ArgumentParser(prog="python -m trainrun.backends.spark.driver")
    parser.add_argument("--master", required=True)
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--framework", choices=("torch", "horovod"), required=True)
    gpu = parser.add_mutually_exclusive_group(required=True)
    gpu.add_argument("--use-gpu", dest="use_gpu", action="store_true")
    gpu.add_argument("--no-gpu", dest="use_gpu", action="store_false")
    parser.add_argument("--conf", action="append", default=[])
    parser.add_argument("--verbose", action="store_true", help="Spark's own warnings and log lines too")
    parser.add_argument("--ranks-filter", help="show only these ranks' output, e.g. 0 or 0,1")
    parser.add_argument("--rank-cwd", help="the folder each rank starts in (default: its executor's)")
    parser.add_argument("--max-restarts", type=int, default=0, help="run a failed stage again up to N times")
    return parser.parse_args(argv[:cut]), list(argv[cut + 1:])


def record_failure(err: JobFailed) -> bool:
    """Leave the same status record a rank would, so `trainrun` names the rank uniformly (the output channel
    has written it already when the rank's end arrived; this covers a record that could not be written). Whether
    trainrun's runner has the record, and so says the failure itself."""
    status_dir = os.environ.get(STATUS_DIR)
    if err.rank is None or not status_dir or not os.path.isdir(status_dir):
        return False
    if not os.path.exists(os.path.join(status_dir, f"rank-{err.rank}.json")):
        write_record(status_dir, err.rank, err.exit_code, err.signal)
    return True


class _QuietStop:
    """SIGTERM from trainrun (exit barrier, --timeout, a signal to trainrun): cancel the stage and end the session
    without the executors' errors about Python workers that went away, which would read as a crash. Done from a
    thread: the main thread is inside a py4j call, which a signal handler must not re-enter."""

    def __init__(self, session: Any, verbose: bool) -> None:
        self.signum: int | None = None
        self._session, self._verbose = session, verbose
        self._requested = threading.Event()
        threading.Thread(target=self._stop, daemon=True).start()
        signal.signal(signal.SIGTERM, self._handler)

    def _handler(self, signum: int, _frame: object) -> None:
        self.signum = signum
        self._requested.set()

    def _stop(self) -> None:
        self._requested.wait()
        try:
            if not self._verbose:
                self._session.sparkContext.setLogLevel("OFF")
            self._session.sparkContext.cancelAllJobs()
        except Exception:
            pass


def run_in_session(stage: BarrierStage, run: RunOptions) -> None:
    """A plan's stage (trainrun.run(spark=session)) in the caller's SparkSession, in this process, with the exit
    barrier and timeout of `run` applied here; raises JobFailed as trainrun's runner does. A function's rank 0
    result is written where `main` writes it."""
    result = run_barrier_job(stage, exit_barrier_timeout=run.exit_barrier_timeout, timeout=run.timeout)
    write_result(stage.program, result)


def write_result(program: Program, result: bytes | None) -> None:
    """Rank 0's pickled return value, where a function payload's arguments name it (trainrun.api reads it)."""
    if program.kind == "payload" and result is not None:
        with open(program.args[0], "wb") as f:
            f.write(result)


def main(argv: Sequence[str]) -> int:
    args, rank_args = parse_args(argv)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(args.master).appName("trainrun")
    conf = dict(key_value("--conf", item) for item in args.conf)
    if not args.verbose and "spark.driver.extraJavaOptions" not in conf:
        # Read by spark-submit before the driver JVM starts, so its start-up warnings go too.
        conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={QUIET_LOG4J2}"
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if not args.verbose:
        session.sparkContext.setLogLevel("ERROR")

    stage = BarrierStage(session=session, num_processes=args.num_processes,
                         program=program_from_rank_args(rank_args), framework=args.framework, use_gpu=args.use_gpu,
                         ranks_filter=args.ranks_filter, rank_cwd=args.rank_cwd, max_restarts=args.max_restarts)
    stop = _QuietStop(session, args.verbose)
    try:
        result = run_barrier_job(stage, stopping=lambda: stop.signum is not None)
    except Exception as err:
        # Told to stop (a Slurm time limit or scancel signals the JVM too): whatever the dead JVM raised says no more.
        if stop.signum is not None:
            return 128 + stop.signum
        if not isinstance(err, TrainrunError):
            raise
        if not (isinstance(err, JobFailed) and record_failure(err)):
            print(f"trainrun: {err}", file=sys.stderr)  # what no rank's record tells trainrun's runner
        return err.exit_code
    finally:
        _stop_session(session, stop)
    write_result(stage.program, result)
    return 0


def _stop_session(session: Any, stop: _QuietStop) -> None:
    try:
        session.stop()
    except Exception:
        if stop.signum is None:
            raise


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
