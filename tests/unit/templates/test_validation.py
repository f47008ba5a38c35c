"""Every validation rule, each broken on purpose; errors name field, value, rule and what is valid."""
import subprocess
import sys
import warnings

import pytest

from pooltemplates import (
    Problem,
    TemplateError,
    TemplateWarning,
    check_barrier_job,
    load_template,
    packaged_templates,
    read_template,
)


def warnings_of(name: str, overrides: dict[str, str] | None = None) -> list[Problem]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_template(name, overrides)
    return [w.message.problem for w in caught if isinstance(w.message, TemplateWarning)]


def errors_of(name: str, overrides: dict[str, str]) -> list[Problem]:
    with pytest.raises(TemplateError) as caught:
        load_template(name, overrides)
    return list(caught.value.problems)


@pytest.mark.parametrize("name", packaged_templates())
def test_packaged_templates_are_valid_without_warnings(name: str) -> None:
    assert warnings_of(name) == []


@pytest.mark.parametrize("buffer_max", ["2048m", "2g", "4096m", "2097152k"])
def test_kryo_buffer_max_must_be_below_2048m(buffer_max: str) -> None:
    (problem,) = errors_of("synapse-gpu-large", {"serializer.kryo_buffer_max": buffer_max})
    assert problem.field == "serializer.kryo_buffer_max"
    assert problem.value == buffer_max
    assert "below 2048m" in problem.rule and "SPARK-19006" in problem.rule
    assert "2047m" in problem.valid


def test_kryo_buffer_max_just_below_the_limit_is_fine() -> None:
    load_template("synapse-gpu-large", {"serializer.kryo_buffer_max": "2047m"})


@pytest.mark.parametrize(("field", "value", "rule"), [
    ("executor.memory", "lots", "does not parse"),
    ("executor.memory", "1.5g", "fractional"),
    ("driver.memory", "30x", "unknown unit 'x'"),
    ("executor.memory", "4096", "needs a unit"),
    ("serializer.kryo_buffer_max", "512", "needs a unit"),
    ("gpu.reserve", "ten gigs", "does not parse"),
])
def test_memory_strings_must_parse(field: str, value: str, rule: str) -> None:
    (problem,) = errors_of("synapse-gpu-large", {field: value})
    assert (problem.field, problem.value) == (field, value)
    assert rule in problem.rule
    assert "60g" in problem.valid


@pytest.mark.parametrize(("per_executor", "per_task", "rule"), [
    ("1", "0.3", "must divide gpu.per_executor (1)"),
    ("4", "3", "must divide gpu.per_executor (4)"),
    ("1", "2", "must divide gpu.per_executor (1)"),
    ("3", "1.5", "above 1 must be a whole number"),
])
def test_task_gpu_amount_must_divide_executor_gpu_amount(per_executor: str, per_task: str,
                                                        rule: str) -> None:
    overrides = {"gpu.per_executor": per_executor, "gpu.per_task": per_task}
    (problem,) = errors_of("single-node-multi-gpu", overrides | {"job.kind": "plain"})
    assert (problem.field, problem.value) == ("gpu.per_task", float(per_task))
    assert rule in problem.rule
    assert "0.5, 0.25" in problem.valid


@pytest.mark.parametrize(("per_executor", "per_task"), [("1", "0.5"), ("1", "0.125"), ("4", "2"),
                                                        ("1", "0.1"), ("4", "0.25")])
def test_task_gpu_amounts_that_divide_pass(per_executor: str, per_task: str) -> None:
    load_template("single-node-multi-gpu", {"gpu.per_executor": per_executor,
                                            "gpu.per_task": per_task, "job.kind": "plain"})


def test_gpu_template_needs_a_discovery_script(write_template) -> None:
    path = write_template("no-script", "nodes: 1\ndescription: x\nexecutor: {instances: 1}\n"
                                       "gpu: {per_executor: 2}\n")
    (problem,) = errors_of(str(path), {})
    assert (problem.field, problem.value) == ("gpu.discovery_script", None)
    assert "discovery script" in problem.rule
    assert '"addresses"' in problem.valid


def test_barrier_job_needs_dynamic_allocation_off() -> None:
    (problem,) = errors_of("local-pool", {"dynamic_allocation": "true"})
    assert (problem.field, problem.value) == ("dynamic_allocation", True)
    assert "SPARK-24954" in problem.rule
    assert problem.valid == "false"


def test_barrier_job_needs_no_more_processes_than_task_slots() -> None:
    # local-pool: 2 executors x min(2 cores, 1 GPU / 0.5 per task) = 4 slots.
    load_template("local-pool", {"job.processes": "4"})
    (problem,) = errors_of("local-pool", {"job.processes": "5"})
    assert (problem.field, problem.value) == ("job.processes", 5)
    assert "the pool has 4 (2 executors x 2 slots)" in problem.rule
    assert "SPARK-24819" in problem.rule
    assert problem.valid.startswith("at most 4")


def test_task_slots_count_the_scarcer_of_cpus_and_gpus() -> None:
    # 16 cores / 4 CPUs per task = 4 CPU slots; 4 GPUs / 1 per task = 4 GPU slots.
    template = load_template("multi-node-gpu")
    assert template.task_slots_per_executor() == 4
    assert template.total_task_slots() == 16
    cpu_bound = read_template("multi-node-gpu", {"executor.task_cpus": "8"})
    assert cpu_bound.task_slots_per_executor() == 2


def test_horovod_needs_no_more_executors_than_nodes() -> None:
    (problem,) = errors_of("single-node-multi-gpu", {"executor.instances": "2"})
    assert (problem.field, problem.value) == ("executor.instances", 2)
    assert "Horovod on Spark needs numExecutors <= nodes (1)" in problem.rule
    assert problem.valid.startswith("at most 1")


def test_gpu_reserve_without_unit_is_bytes_and_only_warns() -> None:
    (problem,) = warnings_of("synapse-gpu-minimal", {"gpu.reserve": "10737418240"})
    assert (problem.field, problem.value) == ("gpu.reserve", "10737418240")
    assert "bytes" in problem.rule


def test_gpu_reserve_as_a_bare_yaml_number_is_bytes(write_template) -> None:
    path = write_template("bare", "extends: synapse-gpu-minimal\ngpu: {reserve: 1073741824}\n")
    (problem,) = warnings_of(str(path))
    assert problem.value == "1073741824"
    conf = read_template(str(path)).spark_conf()
    assert conf["spark.rapids.memory.gpu.reserve"] == "1073741824"


def test_gpu_reserve_without_gpus_warns(write_template) -> None:
    path = write_template("cpu", "nodes: 1\ndescription: x\nexecutor: {instances: 1}\n"
                                 "gpu: {reserve: 1g}\n")
    (problem,) = warnings_of(str(path))
    assert (problem.field, problem.rule) == ("gpu.reserve", "has no effect in a template without GPUs")


def test_kryo_buffer_with_java_serializer_warns() -> None:
    (problem,) = warnings_of("synapse-gpu-large", {"serializer.type": "java"})
    assert problem.field == "serializer.kryo_buffer_max"
    assert "JavaSerializer" in problem.rule


@pytest.mark.parametrize(("field", "value", "rule", "valid"), [
    ("nodes", "0", "must be at least 1", "a whole number from 1 to 10000"),
    ("nodes", "10001", "must be at most 10000", "a whole number from 1 to 10000"),
    ("executor.instances", "0", "must be at least 1", "a whole number from 1 to 100000"),
    ("executor.cores", "0", "must be at least 1", "a whole number from 1 to 1024"),
    ("executor.cores", "1000000", "must be at most 1024", "a whole number from 1 to 1024"),
    ("executor.task_cpus", "0", "must be at least 1", "a whole number from 1 to 1024"),
    ("driver.cores", "-1", "must be at least 1", "a whole number from 1 to 1024"),
    ("driver.cores", "1025", "must be at most 1024", "a whole number from 1 to 1024"),
    ("gpu.per_executor", "-1", "must be at least 0", "a whole number from 0 to 64"),
    ("gpu.per_executor", "65", "must be at most 64", "a whole number from 0 to 64"),
    ("job.processes", "0", "must be at least 1", "a whole number from 1 to 100000"),
])
def test_counts_have_documented_ranges(field: str, value: str, rule: str, valid: str) -> None:
    problems = errors_of("local-pool", {field: value})
    assert Problem(field, int(value), rule, valid) in problems


def test_a_huge_core_count_is_one_line_naming_field_value_and_range() -> None:
    with pytest.raises(TemplateError) as caught:
        load_template("local-pool", {"executor.cores": "1000000"})
    assert str(caught.value) == ("template 'local-pool': 1 error\n  - executor.cores = 1000000: must be at most 1024 "
                                 "(valid: a whole number from 1 to 1024)")


@pytest.mark.parametrize(("field", "value", "rule"), [
    ("executor.memory", "0g", "must be above 0"),
    ("driver.memory", "0m", "must be above 0"),
    ("serializer.kryo_buffer_max", "0k", "must be above 0"),
    ("executor.memory", "65t", "is larger than any machine's memory"),
    ("executor.memory", "99999999999999999999p", "is larger than any machine's memory"),
    ("gpu.reserve", "65t", "is larger than any GPU's memory"),
    ("executor.memory", "1" * 5000 + "g", "memory string does not parse: has more than 20 digits"),
])
def test_sizes_are_positive_and_at_most_64t(field: str, value: str, rule: str) -> None:
    (problem,) = errors_of("local-pool", {field: value})
    assert (problem.field, problem.value, problem.rule) == (field, value, rule)
    assert problem.valid == "a whole number with a unit b, k, m, g, t or p, at most 64t, e.g. 512m or 60g"
    assert len(str(problem)) < 250


def test_the_largest_size_is_accepted() -> None:
    assert load_template("local-pool", {"executor.memory": "64t"}).executor.memory == "64t"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_non_finite_task_gpu_amounts_are_refused(value: str) -> None:
    (problem,) = errors_of("local-pool", {"gpu.per_task": value})
    assert (problem.field, problem.rule, problem.valid) == ("gpu.per_task", "must be a finite number", "a number")
    assert str(problem).startswith(f"gpu.per_task = {float(value)!r}: must be a finite number")


def test_non_finite_numbers_in_a_file_are_refused(write_template) -> None:
    path = write_template("nan", "extends: local-pool\ngpu: {per_task: .nan}\n")
    (problem,) = errors_of(str(path), {})
    assert (problem.field, problem.rule) == ("gpu.per_task", "must be a finite number")


def test_an_echoed_value_is_cut_to_80_characters() -> None:
    (problem,) = errors_of("local-pool", {"executor.memory": "x" * 10_000})
    shown = str(problem).split(": memory string")[0].removeprefix("executor.memory = ")
    assert len(shown) == 80 and "..." in shown


def test_task_gpu_amount_must_be_positive() -> None:
    (problem,) = errors_of("local-pool", {"gpu.per_task": "0"})
    assert (problem.field, problem.rule) == ("gpu.per_task", "must be above 0")


def test_a_task_cannot_need_more_cpus_than_an_executor_has() -> None:
    (problem,) = errors_of("local-pool", {"executor.task_cpus": "3"})
    assert (problem.field, problem.value) == ("executor.task_cpus", 3)
    assert "executor.cores = 2" in problem.rule
    assert problem.valid == "a whole number from 1 to 2"


@pytest.mark.parametrize(("key", "owner"), [
    ("spark.executor.instances", "executor.instances"),
    ("spark.kryoserializer.buffer.max", "serializer.kryo_buffer_max"),
    ("spark.task.resource.gpu.amount", "gpu.per_task"),
    ("spark.executorEnv.FOO", "executor.env.FOO"),
])
def test_extra_conf_must_not_set_what_a_field_sets(key: str, owner: str) -> None:
    (problem,) = errors_of("local-pool", {f"conf.{key}": "1"})
    assert (problem.field, problem.value) == (f"conf.{key}", "1")
    assert owner in problem.rule
    assert problem.valid == f"set {owner} instead"


def test_extra_conf_keys_start_with_spark() -> None:
    (problem,) = errors_of("local-pool", {"conf.sprak.sql.shuffle.partitions": "8"})
    assert "outside spark.*" in problem.rule


def test_all_errors_are_reported_together() -> None:
    problems = errors_of("synapse-gpu-large", {
        "serializer.kryo_buffer_max": "4g",
        "executor.memory": "lots",
        "gpu.per_task": "0.3",
        "executor.instances": "5",
        "conf.spark.executor.cores": "2",
        "executor.cores": "many",
    })
    assert {problem.field for problem in problems} == {
        "serializer.kryo_buffer_max", "executor.memory", "gpu.per_task", "executor.instances",
        "conf.spark.executor.cores", "executor.cores"}


def test_error_message_names_field_value_rule_and_valid() -> None:
    with pytest.raises(TemplateError) as caught:
        load_template("synapse-gpu-large", {"serializer.kryo_buffer_max": "2048m"})
    assert str(caught.value) == (
        "template 'synapse-gpu-large': 1 error\n"
        "  - serializer.kryo_buffer_max = '2048m': spark.kryoserializer.buffer.max must be below"
        " 2048m (SPARK-19006) (valid: at most 2047m, e.g. 2000m)")
    assert isinstance(caught.value, ValueError)


# PySpark 4.3's TorchDistributor._get_num_tasks: int(spark.task.resource.gpu.amount), at least 1, and
# num_processes a multiple of it.
TORCH_DISTRIBUTOR = {"job.kind": "torch-distributor"}


@pytest.mark.parametrize("name", [name for name in packaged_templates()
                                  if read_template(name).gpu.per_task.is_integer()])
def test_packaged_templates_with_whole_gpus_per_task_run_torch_distributor(name: str) -> None:
    assert warnings_of(name, TORCH_DISTRIBUTOR) == []


@pytest.mark.parametrize("per_task", ["0.5", "0.25"])
def test_torch_distributor_refuses_a_fractional_gpu_per_task(per_task: str) -> None:
    # local-pool's placeholder GPU is shared by two tasks: fine for a barrier job, not for TorchDistributor.
    (problem,) = errors_of("local-pool", {**TORCH_DISTRIBUTOR, "gpu.per_task": per_task})
    assert (problem.field, problem.value) == ("gpu.per_task", float(per_task))
    assert "TorchDistributor reads spark.task.resource.gpu.amount with int()" in problem.rule
    assert problem.valid == "a whole number that divides gpu.per_executor: 1"


def test_torch_distributor_without_gpus_takes_any_gpu_per_task() -> None:
    load_template("local-pool", {**TORCH_DISTRIBUTOR, "gpu.per_executor": "0"})


def test_torch_distributor_needs_processes_a_multiple_of_the_gpus_per_task() -> None:
    overrides = {**TORCH_DISTRIBUTOR, "gpu.per_task": "2", "job.processes": "3"}
    (problem,) = errors_of("single-node-multi-gpu", overrides)
    assert (problem.field, problem.value) == ("job.processes", 3)
    assert "multiple of spark.task.resource.gpu.amount (2)" in problem.rule
    assert problem.valid == "a multiple of 2"


def test_torch_distributor_tasks_hold_a_process_per_gpu() -> None:
    # 4 GPUs / 2 per task = 2 barrier tasks of 2 processes each: 4 processes fit, 6 do not.
    overrides = {**TORCH_DISTRIBUTOR, "gpu.per_task": "2"}
    load_template("single-node-multi-gpu", {**overrides, "job.processes": "4"})
    (problem,) = errors_of("single-node-multi-gpu", {**overrides, "job.processes": "6"})
    assert problem.field == "job.processes" and "a task slot per 2 processes" in problem.rule
    assert problem.valid.startswith("at most 4,")


def test_barrier_job_check_applies_the_torch_distributor_rule() -> None:
    template = load_template("single-node-multi-gpu", {**TORCH_DISTRIBUTOR, "gpu.per_task": "2"})
    check_barrier_job(template, num_processes=4, use_gpu=True)
    with pytest.raises(TemplateError) as caught:
        check_barrier_job(template, num_processes=3, use_gpu=True)
    assert [(problem.field, problem.value) for problem in caught.value.problems] == [("num_processes", 3)]


def test_cli_refuses_local_pool_as_a_torch_distributor_pool() -> None:
    result = subprocess.run([sys.executable, "-m", "pooltemplates", "validate", "local-pool",
                             "--set", "job.kind=torch-distributor"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.startswith("error: template 'local-pool': 1 error\n  - gpu.per_task = 0.5: PySpark's "
                                    "TorchDistributor reads spark.task.resource.gpu.amount with int()")
