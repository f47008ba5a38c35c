"""Finding templates by name or path, `extends`, and the type checks of template files."""
import time

import pytest

from pooltemplates import Problem, TemplateError, load_template, packaged_templates, read_template
from pooltemplates.loading import MAX_TEMPLATE_BYTES, MAX_TEMPLATE_NODES


def test_the_issue_templates_are_packaged() -> None:
    assert set(packaged_templates()) >= {"synapse-gpu-large", "synapse-gpu-minimal",
                                         "single-node-multi-gpu", "multi-node-gpu", "local-pool"}


def test_synapse_large_extends_minimal() -> None:
    template = load_template("synapse-gpu-large")
    assert template.name == "synapse-gpu-large"
    assert template.executor.instances == 3  # from synapse-gpu-minimal
    assert template.gpu.reserve == "10g"  # from synapse-gpu-minimal
    assert template.executor.memory == "60g"


def test_a_path_loads_a_file_named_after_it(write_template) -> None:
    path = write_template("mine", "description: mine\nnodes: 1\nexecutor: {instances: 1}\n")
    template = load_template(str(path))
    assert template.name == "mine"
    assert template.spark_conf() == {"spark.executor.instances": "1"}


def test_a_file_extends_a_packaged_template_by_name(write_template) -> None:
    path = write_template("bigger", "extends: local-pool\nnodes: 3\nexecutor: {instances: 3}\n")
    template = load_template(str(path))
    assert (template.nodes, template.executor.instances, template.executor.cores) == (3, 3, 2)
    assert template.conf == {"spark.sql.shuffle.partitions": "4"}


def test_a_file_extends_another_file_relative_to_itself(write_template) -> None:
    write_template("base", "description: base\nnodes: 2\nexecutor: {instances: 2, cores: 4}\n")
    path = write_template("child", "extends: ./base.yaml\nexecutor: {cores: 8}\n")
    template = load_template(str(path))
    assert (template.description, template.executor.instances, template.executor.cores) == (
        "base", 2, 8)


def test_a_child_can_unset_an_inherited_value(write_template) -> None:
    path = write_template("no-kryo", "extends: synapse-gpu-large\nserializer: {kryo_buffer_max: null}\n")
    assert "spark.kryoserializer.buffer.max" not in load_template(str(path)).spark_conf()


def test_extends_cycles_are_errors(write_template) -> None:
    write_template("a", "extends: ./b.yaml\n")
    path = write_template("b", "extends: ./a.yaml\n")
    with pytest.raises(TemplateError) as caught:
        load_template(str(path))
    (problem,) = caught.value.problems
    assert problem.field == "extends"
    assert "cycle" in problem.rule


def test_unknown_template_name_lists_the_packaged_ones() -> None:
    with pytest.raises(TemplateError) as caught:
        load_template("synapse-gpu-huge")
    (problem,) = caught.value.problems
    assert (problem.field, problem.value) == ("template", "synapse-gpu-huge")
    assert "synapse-gpu-large" in problem.valid


def test_missing_file_is_an_error(tmp_path) -> None:
    with pytest.raises(TemplateError, match="file does not exist"):
        load_template(str(tmp_path / "nowhere.yaml"))


@pytest.mark.parametrize(("text", "rule"), [
    ("nodes: [1\n", "is not valid YAML"),
    ("- a list\n", "is not a valid template: it holds a YAML sequence, not a mapping"),
    ("extends: [a, b]\n", "must name one template"),
])
def test_malformed_files_are_errors(write_template, text: str, rule: str) -> None:
    path = write_template("bad", text)
    with pytest.raises(TemplateError) as caught:
        load_template(str(path))
    assert rule in caught.value.problems[0].rule


def test_type_problems_in_a_file_are_listed_together(write_template) -> None:
    path = write_template("typos", (
        "name: other\n"
        "description: typos\n"
        "executor: {instances: two, colour: red, env: {A: [1]}}\n"
        "gpu: {per_task: true}\n"
        "job: {kind: barier}\n"
        "conf: spark.x=1\n"
    ))
    with pytest.raises(TemplateError) as caught:
        read_template(str(path))
    found = {(problem.field, problem.rule) for problem in caught.value.problems}
    assert found == {
        ("name", "a template's name is its file name"),
        ("nodes", "is required"),
        ("executor.instances", "has the wrong type"),
        ("executor.colour", "is not a template setting"),
        ("executor.env.A", "must be a single value"),
        ("gpu.per_task", "has the wrong type"),
        ("job.kind", "is not a known choice"),
        ("conf", "must be a mapping"),
    }


def test_yaml_scalars_in_conf_and_env_become_spark_text(write_template) -> None:
    path = write_template("scalars", (
        "description: scalars\nnodes: 1\n"
        "executor: {instances: 1, memory: 2g, env: {GROW: true}}\n"
        "conf: {spark.sql.shuffle.partitions: 8, spark.speculation: false}\n"
    ))
    conf = load_template(str(path)).spark_conf()
    assert conf["spark.executorEnv.GROW"] == "true"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.speculation"] == "false"


def the_problem(reference: str) -> Problem:
    with pytest.raises(TemplateError) as caught:
        load_template(reference)
    (problem,) = caught.value.problems
    return problem


def test_a_file_that_is_no_template_is_named_not_shown(write_template) -> None:
    path = write_template("passwd", "root:x:0:0:root:/root:/bin/bash\nsecret:x:1:1::/:/bin/sh\n")
    problem = the_problem(str(path))
    assert str(problem) == (f"template = {str(path)!r}: is not a valid template: it holds a YAML scalar, not a "
                            "mapping (valid: a YAML mapping with keys such as description, nodes, executor, gpu)")


def test_a_yaml_error_gives_its_position_not_the_file_text(write_template) -> None:
    path = write_template("broken", "description: x\nsecret: [hunter2\n")
    problem = the_problem(str(path))
    assert problem.rule.startswith("is not valid YAML (") and "line " in problem.rule
    assert "hunter2" not in str(problem)


@pytest.mark.parametrize(("reference", "rule"), [
    ("/", "is not a regular file (a directory or a device)"),
    ("/dev/zero", "is not a regular file (a directory or a device)"),
    ("/nowhere/at/all.yaml", "file does not exist"),
])
def test_directories_devices_and_missing_files_are_one_error(reference: str, rule: str) -> None:
    problem = the_problem(reference)
    assert (problem.field, problem.value, problem.rule) == ("template", reference, rule)


def test_binary_and_oversized_files_are_refused(tmp_path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x7fELF\xff\xfe\x00")
    assert the_problem(str(binary)).rule == "is not UTF-8 text, so not a template"
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * MAX_TEMPLATE_BYTES)
    assert the_problem(str(big)).rule == "is larger than 1024 KiB, so not a template"


def billion_laughs(levels: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text", [billion_laughs(10), "a: &a [*a]\n", "a: &a {b: *a}\n"])
def test_alias_bombs_and_self_references_are_refused_quickly(write_template, text: str) -> None:
    path = write_template("bomb", text)
    started = time.monotonic()
    problem = the_problem(str(path))
    assert time.monotonic() - started < 1
    assert problem.rule.startswith(f"expands to more than {MAX_TEMPLATE_NODES} YAML nodes")
    assert len(str(problem)) < 400


def test_deep_nesting_is_refused(write_template) -> None:
    path = write_template("deep", "a: " + "[" * 100_000)
    assert the_problem(str(path)).rule == "nests too deeply to be a template"


def test_anchors_and_aliases_within_the_bound_still_load(write_template) -> None:
    path = write_template("shared", "description: &d shared\nnodes: 1\nexecutor: {instances: 1, env: {A: *d}}\n")
    assert load_template(str(path)).executor.env == {"A": "shared"}
