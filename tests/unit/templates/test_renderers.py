"""Render parameters and platform rules that the goldens (all at default parameters) do not show."""
import json

import pytest

from pooltemplates import TemplateError, load_template, render
from pooltemplates.targets import target_parameters


def test_spark_conf_is_what_the_launcher_applies() -> None:
    assert load_template("local-pool").spark_conf() == {
        "spark.driver.memory": "1g",
        "spark.driver.cores": "1",
        "spark.executor.instances": "2",
        "spark.executor.cores": "2",
        "spark.executor.memory": "1g",
        "spark.dynamicAllocation.enabled": "false",
        "spark.executor.resource.gpu.amount": "1",
        "spark.executor.resource.gpu.discoveryScript": "/opt/trainstack/discover-gpus.sh",
        "spark.task.resource.gpu.amount": "0.5",
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
        "spark.kryoserializer.buffer.max": "256m",
        "spark.sql.shuffle.partitions": "4",
    }


def test_cpu_templates_set_no_gpu_resources() -> None:
    conf = load_template("local-pool", {"gpu.per_executor": "0", "job.kind": "plain"}).spark_conf()
    assert not [key for key in conf if ".resource.gpu." in key]


def test_spark_submit_quotes_values_for_the_shell() -> None:
    template = load_template("local-pool", {"executor.env.GREETING": "hello world"})
    assert "--conf 'spark.executorEnv.GREETING=hello world'\n" in render(template, "spark-submit")


def test_spark_defaults_escapes_backslashes() -> None:
    template = load_template("local-pool", {"conf.spark.driver.extraJavaOptions": r"-Dp=C:\tmp"})
    assert r"-Dp=C:\\tmp" in render(template, "spark-defaults")


def test_databricks_node_type_and_runtime_are_parameters() -> None:
    spec = json.loads(render(load_template("multi-node-gpu"), "databricks",
                             node_type="g5.12xlarge", spark_version="16.4.x-gpu-ml-scala2.12"))
    assert spec["node_type_id"] == "g5.12xlarge"
    assert spec["driver_node_type_id"] == "g5.12xlarge"
    assert spec["spark_version"] == "16.4.x-gpu-ml-scala2.12"
    spec = json.loads(render(load_template("multi-node-gpu"), "databricks",
                             driver_node_type="Standard_D8ds_v5"))
    assert spec["driver_node_type_id"] == "Standard_D8ds_v5"


def test_databricks_needs_a_node_type_when_no_default_has_the_gpus() -> None:
    template = load_template("single-node-multi-gpu", {"gpu.per_executor": "8", "job.processes": "8",
                                                       "executor.task_cpus": "2"})
    with pytest.raises(TemplateError) as caught:
        render(template, "databricks")
    assert caught.value.problems[0].field == "node_type"
    assert json.loads(render(template, "databricks", node_type="Standard_ND96asr_v4"))


def test_databricks_and_synapse_leave_gpu_discovery_to_the_platform() -> None:
    template = load_template("multi-node-gpu")
    databricks = json.loads(render(template, "databricks"))["spark_conf"]
    synapse = json.loads(render(template, "synapse").removeprefix("%%configure -f\n"))["conf"]
    for conf in (databricks, synapse):
        assert "spark.executor.resource.gpu.amount" not in conf
        assert "spark.executor.resource.gpu.discoveryScript" not in conf
    assert databricks["spark.task.resource.gpu.amount"] == "1"


def test_kubernetes_image_is_a_parameter_and_gpus_come_from_nvidia() -> None:
    args = render(load_template("multi-node-gpu"), "kubernetes", image="registry/trainstack:2-gpu")
    assert "--conf spark.kubernetes.container.image=registry/trainstack:2-gpu\n" in args
    assert "--conf spark.executor.resource.gpu.vendor=nvidia.com\n" in args
    assert "--conf spark.executor.resource.gpu.amount=4\n" in args


def test_kubernetes_cpu_templates_use_the_cpu_image() -> None:
    template = load_template("local-pool", {"gpu.per_executor": "0", "job.kind": "plain"})
    args = render(template, "kubernetes")
    assert "spark.kubernetes.container.image=localhost:5000/trainstack:cpu-py3.11-" in args
    assert "vendor" not in args


def test_kubernetes_dynamic_allocation_tracks_shuffle_files() -> None:
    template = load_template("local-pool", {"job.kind": "plain", "dynamic_allocation": "true"})
    assert "spark.dynamicAllocation.shuffleTracking.enabled=true" in render(template, "kubernetes")


def test_unknown_targets_and_parameters_are_errors() -> None:
    template = load_template("local-pool")
    with pytest.raises(TemplateError) as caught:
        render(template, "yarn")
    assert "kubernetes" in caught.value.problems[0].valid
    with pytest.raises(TemplateError) as caught:
        render(template, "synapse", image="x", node_type="y")
    assert [problem.field for problem in caught.value.problems] == ["image", "node_type"]


def test_parameters_left_as_none_take_defaults() -> None:
    template = load_template("local-pool")
    assert render(template, "synapse", image=None) == render(template, "synapse")
    assert target_parameters("databricks") == ["node_type", "driver_node_type", "spark_version"]
