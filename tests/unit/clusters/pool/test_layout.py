"""The local pool's layout of a template: containers, network, ports and GPUs, before any docker call."""
import json
from pathlib import Path

import pytest
import yaml

from pooltemplates import TemplateError, load_template, packaged_templates
from trainstack.clusters.pool.layout import pool_layout

GOLDEN = Path(__file__).parent / "golden" / "layout"


@pytest.mark.parametrize("name", packaged_templates())
def test_layout_matches_golden(name: str, golden) -> None:
    golden(f"layout/{name}.local-pool.json", json.dumps(pool_layout(load_template(name)), indent=2) + "\n")


def test_every_layout_golden_belongs_to_a_template() -> None:
    assert sorted(path.name for path in GOLDEN.iterdir()) == sorted(f"{name}.local-pool.json"
                                                                      for name in packaged_templates())


def test_local_pool_with_real_gpus_hands_each_worker_its_own() -> None:
    plan = (pool_layout(load_template("local-pool", {"gpu.per_executor": "2"}), gpus="nvidia",
                             pool_name="ci-pool"))
    assert plan["image"] == "trainstack:gpu"
    assert plan["network"]["name"] == "ci-pool"
    assert [worker["gpu_device_ids"] for worker in plan["workers"]] == [["0", "1"], ["2", "3"]]
    assert all("TRAINSTACK_GPU_ADDRESSES" not in worker["environment"]
               and "RAY_ON_SPARK_WORKER_GPU_NUM" not in worker["environment"] for worker in plan["workers"])


def test_local_pool_workers_make_room_for_every_executor() -> None:
    template = load_template("local-pool", {"executor.instances": "3", "job.kind": "plain"})
    (first, second) = (pool_layout(template))["workers"]
    # Two executors per worker: 2 x 2 cores, 2 x 1g, 2 x 1 placeholder GPU.
    assert first["command"][2:6] == ["--cores", "4", "--memory", "2g"]
    assert first["environment"]["TRAINSTACK_GPU_ADDRESSES"] == "0,1"
    # Ray on Spark counts a worker's GPUs with nvidia-smi, which sees no placeholder: the count it reads instead.
    assert first["environment"]["RAY_ON_SPARK_WORKER_GPU_NUM"] == "2"
    assert "-Dspark.worker.resource.gpu.amount=2 " in first["environment"]["SPARK_WORKER_OPTS"]
    assert second["name"] == "trainstack-pool-worker-2"


def test_local_pool_rejects_unknown_gpu_modes() -> None:
    with pytest.raises(TemplateError) as caught:
        pool_layout(load_template("local-pool"), gpus="amd")
    assert caught.value.problems[0].valid == "one of placeholder, nvidia"


def test_local_pool_placeholder_gpus_differ_between_workers() -> None:
    plan = (pool_layout(load_template("local-pool", {"nodes": "3", "executor.instances": "3"})))
    addresses = [worker["environment"]["TRAINSTACK_GPU_ADDRESSES"] for worker in plan["workers"]]
    assert addresses == ["0", "1", "2"]
    assert [worker["gpu_amount"] for worker in plan["workers"]] == [1, 1, 1]


def test_notebook_reads_the_pools_effective_template_back(tmp_path) -> None:
    template = load_template("local-pool", {"nodes": "3", "executor.instances": "3"})
    notebook = pool_layout(template, notebook_port=8890)["notebook"]
    path = tmp_path / Path(notebook["template_file"]["target"]).name
    path.write_text(yaml.safe_dump(notebook["template_file"]["data"]))
    assert notebook["environment"]["TRAINSTACK_POOL_TEMPLATE"] == notebook["template_file"]["target"]
    assert load_template(str(path)) == template


def test_no_notebook_unless_asked() -> None:
    assert pool_layout(load_template("local-pool"))["notebook"] is None


def test_mlflow_runs_in_the_notebook_published_on_loopback() -> None:
    notebook = pool_layout(load_template("local-pool"), notebook_port=8890, mlflow_port=5050)["notebook"]
    assert notebook["environment"]["MLFLOW_PORT"] == "5000"
    assert notebook["ports"][1] == {"container": 5000, "host": 5050, "host_ip": "127.0.0.1"}
    assert "MLFLOW_PORT" not in pool_layout(load_template("local-pool"), notebook_port=8890)["notebook"]["environment"]
