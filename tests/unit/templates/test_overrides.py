"""`--set key=value`: dotted keys, values typed by the schema, clear errors for unknown keys."""
import pytest

from pooltemplates import TemplateError, load_template, parse_assignments, read_template


def test_values_take_the_type_of_their_field() -> None:
    template = read_template("local-pool", {
        "executor.instances": "3",
        "gpu.per_task": "0.25",
        "dynamic_allocation": "TRUE",
        "executor.memory": "2g",
        "job.kind": "plain",
        "description": "tweaked",
    })
    assert template.executor.instances == 3
    assert template.gpu.per_task == 0.25
    assert template.dynamic_allocation is True
    assert template.executor.memory == "2g"
    assert template.job.kind == "plain"
    assert template.description == "tweaked"


def test_conf_and_env_keys_keep_their_dots_and_values_stay_text() -> None:
    template = load_template("local-pool", {
        "conf.spark.sql.adaptive.enabled": "no",
        "executor.env.NCCL_DEBUG": "INFO",
    })
    assert template.conf["spark.sql.adaptive.enabled"] == "no"
    assert template.spark_conf()["spark.executorEnv.NCCL_DEBUG"] == "INFO"
    assert template.conf["spark.sql.shuffle.partitions"] == "4"  # the rest of conf stays


def test_overrides_apply_after_extends() -> None:
    template = load_template("multi-node-gpu", {"nodes": "8", "executor.instances": "8"})
    assert (template.nodes, template.executor.instances) == (8, 8)
    assert template.gpu.per_executor == 4  # inherited from single-node-multi-gpu


@pytest.mark.parametrize(("key", "value", "rule", "valid"), [
    ("executor.instances", "three", "has the wrong type", "a whole number"),
    ("gpu.per_task", "half", "has the wrong type", "a number"),
    ("dynamic_allocation", "yes", "has the wrong type", "true or false"),
    ("serializer.type", "pickle", "is not a known choice", "one of kryo, java"),
])
def test_values_that_do_not_fit_the_field_are_errors(key: str, value: str, rule: str,
                                                     valid: str) -> None:
    with pytest.raises(TemplateError) as caught:
        read_template("local-pool", {key: value})
    (problem,) = caught.value.problems
    assert (problem.field, problem.value, problem.rule, problem.valid) == (key, value, rule, valid)


def test_unknown_key_suggests_the_close_ones() -> None:
    with pytest.raises(TemplateError) as caught:
        read_template("local-pool", {"executor.instance": "3"})
    (problem,) = caught.value.problems
    assert problem.rule == "is not a template setting"
    assert problem.valid.startswith("did you mean executor.instances")


def test_unknown_key_without_close_match_lists_every_key() -> None:
    with pytest.raises(TemplateError) as caught:
        read_template("local-pool", {"colour": "blue"})
    (problem,) = caught.value.problems
    assert "executor.env.NAME" in problem.valid and "conf.NAME" in problem.valid


@pytest.mark.parametrize(("key", "rule"), [
    ("gpu", "names a section; set one key in it"),
    ("conf", "names a mapping; set one entry of it"),
    ("nodes.count", "is not a section"),
])
def test_keys_must_name_one_setting(key: str, rule: str) -> None:
    with pytest.raises(TemplateError) as caught:
        read_template("local-pool", {key: "1"})
    assert caught.value.problems[0].rule == rule


def test_every_bad_override_is_reported_together() -> None:
    with pytest.raises(TemplateError) as caught:
        read_template("local-pool", {"nodes": "x", "gpu.per_task": "y", "colour": "blue"})
    assert [problem.field for problem in caught.value.problems] == ["nodes", "gpu.per_task",
                                                                    "colour"]


def test_override_errors_come_with_rule_errors() -> None:
    with pytest.raises(TemplateError) as caught:
        load_template("local-pool", {"colour": "blue", "serializer.kryo_buffer_max": "3g"})
    assert [problem.field for problem in caught.value.problems] == [
        "colour", "serializer.kryo_buffer_max"]


def test_parse_assignments_splits_on_the_first_equals_sign() -> None:
    assert parse_assignments(["conf.spark.driver.extraJavaOptions=-Da=b", "nodes=2"]) == {
        "conf.spark.driver.extraJavaOptions": "-Da=b", "nodes": "2"}


def test_parse_assignments_rejects_text_without_key_and_value() -> None:
    with pytest.raises(TemplateError) as caught:
        parse_assignments(["nodes", "=3"])
    assert [problem.value for problem in caught.value.problems] == ["nodes", "=3"]
    assert caught.value.problems[0].rule == "must look like key=value"
