"""Why Spark aborted the barrier stage, in one line a user can act on, from the driver's Py4J error text.

The text's first line is always "An error occurred while calling ...collectAndServe."; the cause follows on
the Java exception's lines, e.g. for a worker that died under a rank:

    : org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover from a failed
    barrier ResultStage. Most recent failure reason: Stage failed because barrier task ResultTask(0, 1)
    finished unsuccessfully.
    ExecutorLostFailure (executor 0 exited caused by one of the running tasks) Reason: Command exited with code 137
"""
from __future__ import annotations

import re
from typing import Mapping

STAGE_ABORTED = re.compile(r"Job aborted due to stage failure: (.+)")
BARRIER_TASK = re.compile(r"barrier task ResultTask\(\d+, (\d+)\)")
# Non-barrier wording of the same loss names the task and its host: "Lost task 1.0 in stage 0.0 (TID 1)
# (172.17.0.4 executor 1): ExecutorLostFailure ...".
LOST_TASK = re.compile(r"Lost task (\d+)\.\d+ in stage \S+ \(TID \d+\) \((\S+) executor \S+\)")
EXECUTOR_LOST = re.compile(r"ExecutorLostFailure \(executor (\S+) exited[^)]*\)(?: Reason: (.+))?")
# Spark's job submission found fewer task slots than the stage's tasks each time it checked, and gave up.
SLOTS_CHECK_FAILED = re.compile(r"BarrierJobSlotsNumberCheckFailed|\[SPARK-24819\]")
JAVA_EXCEPTION = re.compile(r"^: (?:[\w$.]+\.)?(\w+(?:Exception|Error)): (.+)", re.MULTILINE)


def describe_stage_failure(error_text: str, rank_hosts: Mapping[int, str]) -> str:
    """The cause of a failed barrier stage; `rank_hosts` are the hosts the ranks reported from."""
    if out_of_slots(error_text):
        return ("Spark found fewer free task slots than the stage's ranks each time it checked "
                "(spark.scheduler.barrier.maxConcurrentTasksCheck.interval and .maxFailures: every 15s, 40 times, "
                "by default): a lost worker did not come back, or the pool is smaller than --num-processes")
    rank, host = _lost_rank(error_text, rank_hosts)
    lost = EXECUTOR_LOST.search(error_text)
    if lost:
        executor, reason = lost.group(1), (lost.group(2) or "").strip()
        whose = f"rank {rank}" + (f" on {host}" if host else "") if rank is not None else "a rank"
        because = f": {reason}" if reason else ""
        return (f"{whose} was lost with its Spark executor {executor}{because} "
                "(the executor or its worker died; see the worker's log); Spark stage aborted")
    aborted = STAGE_ABORTED.search(error_text)
    if aborted:
        return f"Spark aborted the barrier stage: {aborted.group(1).strip()}"
    exception = JAVA_EXCEPTION.search(error_text)
    if exception:
        return f"Spark barrier stage failed: {exception.group(1)}: {exception.group(2).strip()}"
    first_line = error_text.strip().splitlines()[0] if error_text.strip() else "no error text"
    return f"Spark barrier stage failed: {first_line}"


def out_of_slots(error_text: str) -> bool:
    """Whether Spark gave up starting the stage for want of task slots, which running it again cannot help."""
    return SLOTS_CHECK_FAILED.search(error_text) is not None


def _lost_rank(error_text: str, rank_hosts: Mapping[int, str]) -> tuple[int | None, str | None]:
    barrier = BARRIER_TASK.search(error_text)
    if barrier:
        rank = int(barrier.group(1))
        return rank, rank_hosts.get(rank)
    task = LOST_TASK.search(error_text)
    if task:
        return int(task.group(1)), task.group(2)
    return None, None
