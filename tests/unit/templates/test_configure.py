"""%%configure cells (Synapse / Livy session JSON, or --template NAME --set ...) read into templates, checked with the
templates' rules, and sized to the container or the pool the notebook is attached to."""
import json

import pytest

from pooltemplates import TemplateError, load_template, packaged_templates, render
from pooltemplates.configure import Room, configure_session, parse_body, template_from_body
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


# Sizing: the session a cell asks for, within a container (a local master) or the pool its notebook is attached to.
ROOM = Room(cpus=4, memory=8 * 2**30)


def configure_problems(**kwargs) -> list[str]:
    with pytest.raises(TemplateError) as caught:
        configure_session(ROOM, **kwargs)
    return [str(problem) for problem in caught.value.problems]


def test_a_local_session_is_sized_to_the_container() -> None:
    session = configure_session(ROOM, '{"numExecutors": 2, "executorCores": 2}')
    assert (session.slots, session.pool) == (4, None)
    problems = configure_problems(body='{"numExecutors": 3, "executorCores": 2, "executorMemory": "4g", '
                                       '"driverMemory": "2g"}')
    assert problems[0].startswith("numExecutors × executorCores = '3 × 2 = 6': this container has 4 cores")
    assert problems[1].startswith("driverMemory + numExecutors × executorMemory = '2g + 3 × 4g': needs 14.0 GiB, "
                                  "more than this container's 8.0 GiB")


def test_an_empty_body_gets_one_executor_with_every_core() -> None:
    for body in ("", "\n\n", "# nothing asked\n"):
        session = configure_session(ROOM, body)
        assert session.conf == {"spark.executor.instances": "1", "spark.executor.cores": "4"}
        assert session.slots == 4


def test_comment_lines_in_a_body_are_not_json() -> None:
    session = configure_session(ROOM, '{"numExecutors": 1,\n  # two cores\n  "executorCores": 2}')
    assert session.slots == 2
    with pytest.raises(TemplateError, match=r"line 3 column 1"):  # lines keep their numbers
        parse_body('{"numExecutors": 1\n# c\n"executorCores": 2}')


# Fabric's documented %%configure cell (learn.microsoft.com/fabric/data-engineering/author-execute-notebook), its
# comments, trailing commas, workspace fields and a pipeline parameter as the page writes them; sized for ROOM.
FABRIC_CELL = """{
    // You can get a list of valid parameters to config the session from https://github.com/cloudera/livy#request-body.
    "driverMemory": "1g", // Recommended values: ["28g", "56g", "112g", "224g", "400g", "472g"]
    "driverCores": {"activityParameterName": "driverCoresFromNotebookActivity", "defaultValue": 1},
    "executorMemory": "1g",
    "executorCores": 1,
    "conf": {
        // Example of customized property
        "livy.rsc.sql.num-rows": "3000",
        "spark.log.level": "ALL"
    },
    "defaultLakehouse": {  // This overwrites the default lakehouse for current session
        "name": "<lakehouse-name>",
        "id": "<(optional) lakehouse-id>",
    },
    "mountPoints": [
        {"mountPoint": "/myMountPoint", "source": "abfs[s]://<file_system>@<account_name>.dfs.core.windows.net/<p>"},
    ],
    "useStarterPool": false,  // Set to true to force using starter pool
    "useWorkspacePool": "<workspace-pool-name>"
}"""


def test_a_fabric_cell_runs_as_written_without_fabrics_workspace_settings() -> None:
    session = configure_session(ROOM, FABRIC_CELL)
    assert session.conf["spark.driver.cores"] == "1" and session.conf["spark.log.level"] == "ALL"
    assert not any(key.startswith("livy.") for key in session.conf)
    [note] = session.notes
    assert note.startswith("defaultLakehouse, mountPoints, useStarterPool, useWorkspacePool, "
                           "conf.livy.rsc.sql.num-rows: settings of Fabric's workspace or of Livy's server")


def test_comments_and_trailing_commas_are_left_out_outside_strings_only() -> None:
    body = parse_body('{"conf": {"spark.x": "a // b, ]",}, // c\n"name": "n",\n}')
    assert body == {"conf": {"spark.x": "a // b, ]"}, "name": "n"}
    with pytest.raises(TemplateError, match=r"line 2 column 1"):
        parse_body('{"name": "n" // no comma\n"numExecutors": 1}')


def test_a_pool_notebook_is_sized_within_the_pools_template() -> None:
    pool = load_template("local-pool")
    session = configure_session(ROOM, '{"numExecutors": 1}', pool="local-pool")
    assert session.pool == pool and session.conf["spark.cores.max"] == str(pool.executor.cores)
    assert session.conf["spark.executor.memory"] == pool.executor.memory  # the pool's default
    problems = configure_problems(body='{"numExecutors": 3, "executorMemory": "8g"}', pool="local-pool")
    assert problems == ["numExecutors = 3: the pool 'local-pool' has 2 (valid: at most 2)",
                        "executorMemory = '8g': the pool 'local-pool' gives executors 1g (valid: at most 1g)"]


def test_a_template_by_name_with_settings_and_spark_conf_keys() -> None:
    session = configure_session(ROOM, template="local-pool",
                                assignments=["spark.executor.instances=1", "spark.sql.shuffle.partitions=3"])
    assert session.conf["spark.executor.instances"] == "1"
    assert session.conf["spark.sql.shuffle.partitions"] == "3"
    # A local master schedules no GPUs: Spark would wait for them forever; said, not silent.
    assert not any(".resource.gpu." in key for key in session.conf)
    assert "spark.task.resource.gpu.amount" in session.notes[0]
    on_pool = configure_session(ROOM, template="local-pool", assignments=["executor.instances=2"], pool="local-pool")
    assert on_pool.conf["spark.task.resource.gpu.amount"] == "0.5" and on_pool.notes == ()


def test_a_template_too_large_for_the_container_is_named_in_its_own_fields() -> None:
    assert configure_problems(template="local-pool", assignments=["spark.executor.instances=3"]) == [
        "executor.instances × executor.cores = '3 × 2 = 6': this container has 4 cores, and a notebook's local "
        "master runs every executor's tasks on them (valid: at most 4 in all, or a notebook attached to a pool "
        "(invoke pool.up --notebook))"]


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"template": "nosuch-pool"}, "--template = 'nosuch-pool': is neither a packaged template nor a .yaml path "
                                  "(valid: one of local-pool, "),
    ({"template": "local-pool", "assignments": ["spark.executor.instances=two"]},
     "--set spark.executor.instances = 'two': has the wrong type"),
    ({"template": "local-pool", "assignments": ["executor.instance=2"]},
     "--set executor.instance = '2': is not a template setting (valid: did you mean executor.instances"),
    ({"template": "local-pool", "assignments": ["noequals"]}, "--set = 'noequals': must look like key=value"),
    ({"template": "local-pool", "body": '{"numExecutors": 1}'},
     "--template = 'local-pool': a cell has either a JSON body or --template"),
    ({"body": "{}", "assignments": ["executor.instances=1"]}, "--set = 'executor.instances=1': changes a template's "
                                                              "setting (valid: --set together with --template NAME"),
])
def test_bad_options_name_the_option_and_the_valid_values(kwargs: dict, expected: str) -> None:
    problems = configure_problems(**kwargs)
    assert len(problems) == 1 and problems[0].startswith(expected), problems
