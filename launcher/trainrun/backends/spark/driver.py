"""The Spark driver of `trainrun spark`: one barrier stage of N tasks, rank output streamed back.

Run as `python -m trainrun.backends.spark.driver --master URL --num-processes N --framework torch|horovod
--use-gpu|--no-gpu [--conf K=V ...] -- RANK_ARGS` (the plan's argv), or in-process through
`run_barrier_job` when `trainrun.run` is given a SparkSession.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from typing import Any, Sequence

from ...errors import JobFailed, TrainrunError
from ...program import Program
from ...rank.status import STATUS_DIR, write_record
from ...validate import key_value
from .output import OutputServer, ReportedFailure
from .task import TaskConfig, run_barrier_task

QUIET_LOG4J2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2-quiet.properties")


def run_barrier_job(session: Any, num_processes: int, program: Program, framework: str, use_gpu: bool,
                    shown_ranks: str | None = None) -> bytes | None:
    """Run the barrier stage; returns rank 0's pickled result for a function payload, else None."""
    sc = session.sparkContext
    payload = None
    if program.kind == "payload":
        with open(program.target, "rb") as f:
            payload = f.read()
    group = f"trainrun-{uuid.uuid4().hex}"
    # The first failing rank cancels the stage at once, instead of Spark retrying the barrier stage.
    server = OutputServer(sc.getConf().get("spark.driver.host"), lambda failure: sc.cancelJobGroup(group))
    config = TaskConfig(num_processes, program, framework, use_gpu, server.address, payload, shown_ranks)
    sc.setJobGroup(group, "trainrun barrier job", interruptOnCancel=True)
    try:
        results = (sc.parallelize(range(num_processes), num_processes).barrier()
                   .mapPartitions(lambda partition: run_barrier_task(config, partition)).collect())
    except Exception as err:
        failure = _wait_for_reported_failure(server)
        if failure is not None:
            raise JobFailed(failure.exit_code, f"rank {failure.rank} exited with code {failure.exit_code}; "
                            "Spark stage cancelled", failure.rank) from None
        raise JobFailed(1, f"Spark barrier stage failed: {str(err).splitlines()[0]}") from None
    finally:
        server.close()
    return next((r for r in results if r is not None), None)


def _wait_for_reported_failure(server: OutputServer, seconds: float = 2.0) -> ReportedFailure | None:
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
    return parser.parse_args(argv[:cut]), list(argv[cut + 1:])


def program_from_rank_args(args: list[str]) -> Program:
    if args[0] == "-m":
        return Program("module", args[1], tuple(args[2:]))
    if args[0] == "--payload":
        return Program("payload", args[1], tuple(args[2:]))
    return Program("script", args[0], tuple(args[1:]))


def record_failure(err: JobFailed) -> None:
    """Leave the same status record a rank would, so `trainrun` names the rank uniformly."""
    status_dir = os.environ.get(STATUS_DIR)
    if err.rank is not None and status_dir:
        write_record(status_dir, err.rank, err.exit_code)


def main(argv: Sequence[str]) -> int:
    args, rank_args = parse_args(argv)
    program = program_from_rank_args(rank_args)
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
    try:
        result = run_barrier_job(session, args.num_processes, program, args.framework, args.use_gpu,
                                 args.ranks_filter)
    except TrainrunError as err:
        print(f"trainrun: {err}", file=sys.stderr)
        if isinstance(err, JobFailed):
            record_failure(err)
        return err.exit_code
    finally:
        session.stop()
    if program.kind == "payload" and result is not None:
        with open(program.args[0], "wb") as f:
            f.write(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
