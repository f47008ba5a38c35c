"""%%configure bodies (Synapse / Livy session JSON) read into templates, checked with the templates' rules."""
import json

import pytest

from pooltemplates import TemplateError, load_template, packaged_templates, render
from pooltemplates.configure import parse_body, template_from_body
from pooltemplates.targets.synapse import PLATFORM_GPU_KEYS

SYNAPSE_TUTORIAL = {
    "driverMemory": "30g", "driverCores": 4, "executorMemory": "60g", "executorCores": 12, "numExecutors": 3,
    "conf": {"spark.rapids.memory.gpu.reserve": "10g", "spark.executorEnv.TF_FORCE_GPU_ALLOW_GROWTH": "true",
             "spark.kryoserializer.buffer.max": "2000m"},
}


def problems_of(body: dict, defaults: dict | None = None) -> list[str]:
    with pytest.raises(TemplateError) as caught:
        template_from_body(body, defaults or {})
    return [str(problem) for problem in caught.value.problems]


def test_the_synapse_tutorials_body_becomes_its_spark_conf() -> None:
    conf = template_from_body(SYNAPSE_TUTORIAL, {}).spark_conf()
    assert conf == {
        "spark.driver.memory": "30g", "spark.driver.cores": "4", "spark.executor.instances": "3",
        "spark.executor.cores": "12", "spark.executor.memory": "60g", "spark.rapids.memory.gpu.reserve": "10g",
        "spark.kryoserializer.buffer.max": "2000m", "spark.executorEnv.TF_FORCE_GPU_ALLOW_GROWTH": "true"}


@pytest.mark.parametrize("name", packaged_templates())
def test_what_the_synapse_target_writes_reads_back_as_the_same_session(name: str) -> None:
    template = load_template(name)
    cell = render(template, "synapse")
    read = template_from_body(parse_body(cell.split("\n", 1)[1]), {})
    expected = {key: value for key, value in template.spark_conf().items() if key not in PLATFORM_GPU_KEYS}
    assert read.spark_conf() == expected


def test_livy_fields_that_are_spark_conf_keys() -> None:
    body = {"numExecutors": 1, "jars": ["a.jar", "b.jar"], "pyFiles": ["lib.py"], "files": ["data.csv"],
            "archives": ["env.tar.gz#env"], "name": "my-session"}
    conf = template_from_body(body, {}).spark_conf()
    assert {key: conf[key] for key in ("spark.jars", "spark.submit.pyFiles", "spark.files", "spark.archives",
                                       "spark.app.name")} == {
        "spark.jars": "a.jar,b.jar", "spark.submit.pyFiles": "lib.py", "spark.files": "data.csv",
        "spark.archives": "env.tar.gz#env", "spark.app.name": "my-session"}


def test_defaults_fill_only_what_the_cell_leaves_out() -> None:
    template = template_from_body({"numExecutors": 2}, {"numExecutors": 1, "executorCores": 3})
    assert (template.executor.instances, template.executor.cores) == (2, 3)


def test_every_problem_at_once_named_by_the_cells_own_fields() -> None:
    problems = problems_of({"numExecutors": "three", "executorMemory": "60", "proxyUser": "me",
                            "conf": {"spark.kryoserializer.buffer.max": "4g", "notspark.key": "1"}})
    assert len(problems) == 5, problems
    assert problems[0].startswith("proxyUser = 'me': is not a field %%configure takes (valid: one of driverMemory,")
    assert any(p.startswith("numExecutors = 'three': ") for p in problems)
    assert any(p.startswith("executorMemory = '60': needs a unit") for p in problems)
    assert any(p.startswith("conf.spark.kryoserializer.buffer.max = '4g': ") for p in problems)
    assert any(p.startswith("conf.notspark.key = '1': Spark ignores conf keys outside spark.*") for p in problems)


def test_invalid_json_names_line_and_column() -> None:
    with pytest.raises(TemplateError, match=r"is not JSON: Expecting ',' delimiter at line 2 column 3"):
        parse_body('{"numExecutors": 2\n  "executorCores": 1}')
    with pytest.raises(TemplateError, match=r"body = \[1, 2\]: is not a JSON object"):
        parse_body(json.dumps([1, 2]))
