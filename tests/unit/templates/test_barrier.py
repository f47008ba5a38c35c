"""check_barrier_job: what the launcher asks before starting TorchDistributor or Horovod on Spark."""
import pytest

from pooltemplates import TemplateError, check_barrier_job, load_template, read_template


def test_a_job_that_fits_passes() -> None:
    check_barrier_job(load_template("local-pool"), num_processes=4, use_gpu=True)
    check_barrier_job(load_template("multi-node-gpu"), num_processes=16, use_gpu=True)


def test_more_processes_than_task_slots_fail() -> None:
    with pytest.raises(TemplateError) as caught:
        check_barrier_job(load_template("local-pool"), num_processes=5, use_gpu=True)
    (problem,) = caught.value.problems
    assert (problem.field, problem.value) == ("num_processes", 5)
    assert "SPARK-24819" in problem.rule


def test_dynamic_allocation_fails() -> None:
    # A plain-job template may enable dynamic allocation; a barrier job on it still cannot run.
    template = load_template("local-pool", {"job.kind": "plain", "dynamic_allocation": "true"})
    with pytest.raises(TemplateError) as caught:
        check_barrier_job(template, num_processes=2, use_gpu=False)
    assert [problem.field for problem in caught.value.problems] == ["dynamic_allocation"]


def test_gpu_job_needs_gpus(write_template) -> None:
    path = write_template("cpu", "description: cpu\nnodes: 1\nexecutor: {instances: 2, cores: 2}\n")
    template = load_template(str(path))
    check_barrier_job(template, num_processes=4, use_gpu=False)
    with pytest.raises(TemplateError) as caught:
        check_barrier_job(template, num_processes=4, use_gpu=True)
    (problem,) = caught.value.problems
    assert (problem.field, problem.value) == ("gpu.per_executor", 0)


def test_all_problems_are_reported_together() -> None:
    template = read_template("local-pool", {"gpu.per_executor": "0", "dynamic_allocation": "true"})
    with pytest.raises(TemplateError) as caught:
        check_barrier_job(template, num_processes=100, use_gpu=True)
    assert [problem.field for problem in caught.value.problems] == [
        "dynamic_allocation", "num_processes", "gpu.per_executor"]


def test_unset_executor_cores_count_as_one(write_template) -> None:
    path = write_template("small", "description: s\nnodes: 1\nexecutor: {instances: 3}\n")
    template = load_template(str(path))
    assert template.total_task_slots() == 3


def test_a_job_needs_at_least_one_process() -> None:
    with pytest.raises(TemplateError) as caught:
        check_barrier_job(load_template("local-pool"), num_processes=0, use_gpu=False)
    assert caught.value.problems[0].rule == "a job needs a process"
