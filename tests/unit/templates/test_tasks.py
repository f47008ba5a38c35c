"""The `template.*` invoke tasks and `python -m pooltemplates`: print, write files, and report template
errors as `error: ...` with exit code 2."""
import json
import subprocess
import sys

import pytest
from invoke import Collection, Context

from trainstack.tasks import templates as tasks


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


def test_render_exits_2_listing_template_errors(capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        tasks.render_(Context(), "synapse-gpu-large", "synapse",
                      set_=["serializer.kryo_buffer_max=4g", "colour=blue"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "2 errors" in err
    assert "serializer.kryo_buffer_max = '4g'" in err


def test_render_exits_2_for_a_parameter_the_target_lacks(capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        tasks.render_(Context(), "local-pool", "synapse", image="trainstack:cpu")
    assert caught.value.code == 2
    assert "is not a parameter of target synapse" in capsys.readouterr().err


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


def test_module_cli_renders_without_the_repository_tasks(tmp_path) -> None:
    result = subprocess.run([sys.executable, "-m", "pooltemplates", "render", "local-pool", "--target", "spark-submit",
                             "--set", "executor.instances=3"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "--conf spark.executor.instances=3" in result.stdout or "spark.executor.instances=3" in result.stdout


def test_module_cli_reports_errors_with_exit_2(tmp_path) -> None:
    result = subprocess.run([sys.executable, "-m", "pooltemplates", "validate", "local-pool", "--set", "colour=blue"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "colour" in result.stderr
