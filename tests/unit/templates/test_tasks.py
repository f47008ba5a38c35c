"""The invoke tasks: thin wrappers that print, write files and exit 1 on template errors."""
import json

import pytest
from invoke import Collection, Context
from invoke.exceptions import Exit

from pooltemplates import tasks


def test_collection_offers_list_validate_render() -> None:
    assert set(Collection.from_module(tasks).task_names) == {"list", "validate", "render"}


def test_render_prints_the_target(capsys) -> None:
    tasks.render_(Context(), "synapse-gpu-large", "synapse")
    assert capsys.readouterr().out.startswith("%%configure -f\n{")


def test_render_applies_overrides_and_parameters_and_writes_out(tmp_path) -> None:
    out = tmp_path / "cluster.json"
    tasks.render_(Context(), "multi-node-gpu", "databricks", set_=["nodes=6", "executor.instances=6"],
                  out=str(out), node_type="Standard_NC96ads_A100_v4")
    spec = json.loads(out.read_text())
    assert (spec["num_workers"], spec["node_type_id"]) == (6, "Standard_NC96ads_A100_v4")


def test_render_exits_1_listing_template_errors() -> None:
    with pytest.raises(Exit) as caught:
        tasks.render_(Context(), "synapse-gpu-large", "synapse",
                      set_=["serializer.kryo_buffer_max=4g", "colour=blue"])
    assert caught.value.code == 1
    assert "2 errors" in caught.value.message
    assert "serializer.kryo_buffer_max = '4g'" in caught.value.message


def test_render_exits_1_for_a_parameter_the_target_lacks() -> None:
    with pytest.raises(Exit) as caught:
        tasks.render_(Context(), "local-pool", "synapse", image="trainstack:cpu")
    assert "is not a parameter of target synapse" in caught.value.message


def test_validate_prints_warnings_to_stderr(capsys) -> None:
    tasks.validate(Context(), "synapse-gpu-minimal", set_=["gpu.reserve=1024"])
    captured = capsys.readouterr()
    assert captured.out == "synapse-gpu-minimal: valid\n"
    assert captured.err.startswith("warning: template 'synapse-gpu-minimal': gpu.reserve = '1024'")


def test_list_shows_templates_and_targets(capsys) -> None:
    tasks.list_(Context())
    out = capsys.readouterr().out
    assert "  synapse-gpu-large: " in out
    assert "  databricks (parameters: node_type, driver_node_type, spark_version)" in out
