"""The one line trainrun prints when Spark aborts the barrier stage, from the Py4J error texts Spark 4 gives."""
import pytest

from trainrun.backends.spark.stage_failure import describe_stage_failure, out_of_slots

pytestmark = pytest.mark.unit

CALL = "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
# Recorded from `trainrun spark --master local-cluster[2,1,1024]` with one executor SIGKILLed under its rank.
BARRIER_EXECUTOR_LOST = CALL + (
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover from a failed barrier "
    "ResultStage. Most recent failure reason: Stage failed because barrier task ResultTask(0, 1) finished "
    "unsuccessfully.\n"
    "ExecutorLostFailure (executor 0 exited caused by one of the running tasks) Reason: Command exited with code 137\n"
    "\tat org.apache.spark.scheduler.DAGScheduler.$anonfun$abortStage$3(DAGScheduler.scala:4568)\n")
TASK_EXECUTOR_LOST = CALL + (
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 0.0 failed 4 times, "
    "most recent failure: Lost task 1.3 in stage 0.0 (TID 7) (172.18.0.4 executor 3): ExecutorLostFailure "
    "(executor 3 exited unrelated to the running tasks) Reason: Worker shutting down\n")


def test_a_lost_executor_names_the_rank_its_host_and_the_reason():
    line = describe_stage_failure(BARRIER_EXECUTOR_LOST, {0: "172.18.0.3", 1: "172.18.0.4"})
    assert line.startswith("rank 1 on 172.18.0.4 was lost with its Spark executor 0: Command exited with code 137")
    assert line.endswith("Spark stage aborted")


def test_a_local_rank_is_named_without_a_host():
    line = describe_stage_failure(BARRIER_EXECUTOR_LOST, {})
    assert line.startswith("rank 1 was lost with its Spark executor 0: Command exited with code 137")


def test_the_non_barrier_wording_gives_the_host_itself():
    line = describe_stage_failure(TASK_EXECUTOR_LOST, {})
    assert line.startswith("rank 1 on 172.18.0.4 was lost with its Spark executor 3: Worker shutting down")


def test_another_stage_failure_quotes_spark_s_reason():
    text = CALL + ": org.apache.spark.SparkException: Job aborted due to stage failure: Barrier execution mode " \
                  "does not allow run a barrier stage that requires more slots than the total number of slots\n"
    assert describe_stage_failure(text, {}) == (
        "Spark aborted the barrier stage: Barrier execution mode does not allow run a barrier stage that requires "
        "more slots than the total number of slots")


def test_any_other_java_exception_is_named_instead_of_the_py4j_call():
    text = CALL + ": java.lang.IllegalStateException: SparkContext has been shutdown\n\tat org.apache...\n"
    assert describe_stage_failure(text, {}) == (
        "Spark barrier stage failed: IllegalStateException: SparkContext has been shutdown")


def test_unknown_text_falls_back_to_its_first_line():
    assert describe_stage_failure("something odd\nmore", {}) == "Spark barrier stage failed: something odd"


# Recorded from Spark 4.3 (local[1], a stage of 2 barrier tasks, the slot check given up after one failure).
SLOTS_CHECK_FAILED = CALL + (
    ": org.apache.spark.scheduler.BarrierJobSlotsNumberCheckFailed: [SPARK-24819]: Barrier execution mode does not "
    "allow run a barrier stage that requires more slots than the total number of slots in the cluster currently. "
    "Please init a new cluster with more resources(e.g. CPU, GPU) or repartition the input RDD(s) to reduce the "
    "number of slots required to run this barrier stage.\n"
    "\tat org.apache.spark.errors.SparkCoreErrors$.numPartitionsGreaterThanMaxNumConcurrentTasksError("
    "SparkCoreErrors.scala:241)\n")


def test_slots_that_never_came_back_say_which_settings_spark_waited_by():
    line = describe_stage_failure(SLOTS_CHECK_FAILED, {})
    assert line.startswith("Spark found fewer free task slots than the stage's ranks each time it checked "
                           "(spark.scheduler.barrier.maxConcurrentTasksCheck.interval and .maxFailures")
    assert out_of_slots(SLOTS_CHECK_FAILED) and not out_of_slots(BARRIER_EXECUTOR_LOST)
