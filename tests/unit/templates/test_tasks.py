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


def pooltemplates_cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pooltemplates", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize(("args", "error"), [
    (["--target", "kubernetes", "--registry", "bad registry!"],
     "error: render 'local-pool': 1 error\n  - registry = 'bad registry!': is not a registry (valid: HOST[:PORT]"),
    (["--target", "pytorchjob", "--set", "gpu.per_executor=0", "--image", "Bad Image"],
     "error: render 'local-pool': 1 error\n  - image = 'Bad Image': is not a docker image reference"),
    (["--target", "databricks", "--spark-version", "banana"],
     "error: databricks spec for 'local-pool': 1 error\n  - spark_version = 'banana': is not a Databricks runtime "
     "version key (valid: e.g. 15.4.x-scala2.12"),
    (["--target", "synapse", "--out", "no-such-folder/cluster.json"],
     "error: --out: 1 error\n  - --out = 'no-such-folder/cluster.json': cannot be written (No such file or "
     "directory) (valid: a file path in an existing, writable folder)\n"),
])
def test_module_cli_refuses_bad_render_parameters(tmp_path, args, error) -> None:
    result = pooltemplates_cli("render", "local-pool", *args, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(error), result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("registry", ["localhost:5000", "registry.example:5000", "ghcr.io/org", "Reg-1.example"])
def test_module_cli_renders_for_a_good_registry(tmp_path, registry) -> None:
    result = pooltemplates_cli("render", "local-pool", "--target", "kubernetes", "--registry", registry, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"spark.kubernetes.container.image={registry}/trainstack:" in result.stdout


def test_module_cli_reports_every_bad_override_at_once(tmp_path) -> None:
    result = pooltemplates_cli("validate", "local-pool", "--set", "gpu.per_task=0.3", "--set", "executor.instances=0",
                               "--set", "nodes=x", "--set", "colour=blue", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: template 'local-pool': 4 errors\n")
    fields = [line.split(" = ")[0] for line in result.stderr.splitlines()[1:]]
    assert sorted(fields) == ["  - colour", "  - executor.instances", "  - gpu.per_task", "  - nodes"]


def test_render_task_refuses_an_out_file_in_a_missing_folder(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        tasks.render_(Context(), "synapse-gpu-large", "synapse", out=str(tmp_path / "missing" / "x.json"))
    assert caught.value.code == 2
    assert "cannot be written (No such file or directory)" in capsys.readouterr().err
