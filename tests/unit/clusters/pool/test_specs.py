"""Plans translated into docker SDK arguments, compared with reviewed golden files.

Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/unit/clusters/pool`.
"""
import json
from pathlib import Path

import pytest

from trainstack.clusters.containers import network_kwargs
from trainstack.clusters.pool import pool_plan
from trainstack.clusters.pool.specs import container_kwargs, driver_kwargs, notebook_kwargs, volume_kwargs

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "placeholder-shared": ({"workers": 2}, Path("/home/me/job")),
    "nvidia": ({"workers": 2, "gpus": "nvidia", "template": "single-node-multi-gpu"}, None),
}
SPARK_CONF = Path("/tmp/trainstack-pool-x/spark-defaults.conf")


def package_file_under_pkg(relative: str) -> Path:
    return Path("/pkg/pooltemplates") / relative


def docker_arguments(options: dict, share: Path | None) -> dict:
    plan = pool_plan(**options)
    return {
        "network": network_kwargs(plan),
        "volume": volume_kwargs(plan),
        "containers": [container_kwargs(plan, spec, share, package_file_under_pkg, SPARK_CONF)
                       for spec in (plan["master"], *plan["workers"])],
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_docker_arguments_match_golden(case: str, golden) -> None:
    golden(f"docker-{case}.json", json.dumps(docker_arguments(*CASES[case]), indent=2) + "\n")


def test_only_real_gpu_workers_request_devices() -> None:
    placeholder = docker_arguments({"workers": 2}, None)["containers"]
    nvidia = docker_arguments({"workers": 2, "gpus": "nvidia"}, None)["containers"]
    assert not any("device_requests" in kwargs for kwargs in placeholder)
    assert [kwargs.get("device_requests") for kwargs in nvidia] == [
        None,
        [{"driver": "nvidia", "device_ids": ["0"], "capabilities": [["gpu"]]}],
        [{"driver": "nvidia", "device_ids": ["1"], "capabilities": [["gpu"]]}],
    ]


def test_driver_joins_the_pool_network_under_the_pool_label_with_its_work_volume_and_works_in_the_share() -> None:
    kwargs = driver_kwargs("ci-pool", "trainstack:cpu", "ci-pool", ["trainrun", "spark"], "ci-pool-driver-1",
                           Path("/home/me/job"))
    assert kwargs["network"] == "ci-pool"
    assert kwargs["labels"] == {"io.trainstack.pool": "ci-pool", "io.trainstack.pool.role": "driver"}
    assert kwargs["volumes"] == {"ci-pool-work": {"bind": "/home/trainer/work", "mode": "rw"},
                                 "/home/me/job": {"bind": "/job", "mode": "ro"}}
    assert kwargs["working_dir"] == "/job"
    without_share = driver_kwargs("p", "i", "p", ["true"], "p-driver-1", None)
    assert without_share["volumes"] == {"p-work": {"bind": "/home/trainer/work", "mode": "rw"}}
    assert without_share["working_dir"] == "/home/trainer/work"


def test_every_container_and_driver_reads_the_pools_conf_from_a_read_only_mount() -> None:
    containers = docker_arguments({"workers": 2}, None)["containers"]
    driver = driver_kwargs("p", "i", "p", ["true"], "p-driver-1", None, SPARK_CONF)
    for kwargs in (*containers, driver):
        assert kwargs["environment"]["SPARK_CONF_DIR"] == "/etc/trainstack/pool"
        assert kwargs["volumes"][str(SPARK_CONF)] == {"bind": "/etc/trainstack/pool/spark-defaults.conf", "mode": "ro"}


def test_notebook_container_matches_golden(golden) -> None:
    plan = pool_plan(workers=2, notebook_port=8890)
    kwargs = notebook_kwargs(plan, Path("/home/me/job"), SPARK_CONF, SPARK_CONF.parent / "local-pool.yaml")
    golden("docker-notebook.json", json.dumps(kwargs, indent=2) + "\n")


def test_notebook_is_published_on_loopback_with_the_pools_conf_and_template_read_only() -> None:
    plan = pool_plan(workers=3, notebook_port=8890)
    kwargs = notebook_kwargs(plan, None, SPARK_CONF, Path("/tmp/trainstack-pool-x/local-pool.yaml"))
    assert kwargs["command"] == ["lab"]
    assert kwargs["ports"] == {"8888/tcp": ("127.0.0.1", 8890)}
    assert kwargs["network"] == "trainstack-pool" and kwargs["hostname"] == "trainstack-pool-notebook"
    assert kwargs["environment"] == {"SPARK_CONF_DIR": "/etc/trainstack/pool",
                                     "TRAINSTACK_POOL_MASTER": "spark://trainstack-pool-master:7077",
                                     "TRAINSTACK_POOL_TEMPLATE": "/etc/trainstack/pool-template/local-pool.yaml"}
    assert kwargs["volumes"] == {
        "trainstack-pool-work": {"bind": "/home/trainer/work", "mode": "rw"},
        str(SPARK_CONF): {"bind": "/etc/trainstack/pool/spark-defaults.conf", "mode": "ro"},
        "/tmp/trainstack-pool-x/local-pool.yaml": {"bind": "/etc/trainstack/pool-template/local-pool.yaml",
                                                   "mode": "ro"}}


def test_workers_and_the_notebook_share_the_pools_work_volume_and_the_master_does_not() -> None:
    plan = pool_plan(workers=2, notebook_port=8890)
    work = {"bind": "/home/trainer/work", "mode": "rw"}
    assert volume_kwargs(plan) == {"name": "trainstack-pool-work", "labels": {"io.trainstack.pool": "trainstack-pool"}}
    for spec in plan["workers"]:
        assert container_kwargs(plan, spec, locate=Path)["volumes"]["trainstack-pool-work"] == work
    assert notebook_kwargs(plan, None, SPARK_CONF, Path("/tmp/t.yaml"))["volumes"]["trainstack-pool-work"] == work
    assert "trainstack-pool-work" not in container_kwargs(plan, plan["master"], locate=Path)["volumes"]
