"""Ray on Spark in the image beyond the Databricks workflow row (test_workflows.py: worker nodes sized as their
executors, a TorchTrainer that learns): the images' start hook (trainrun.backends.spark.ray_start_hook) turns token
authentication on for driver, head and worker nodes alike, and a driver whose work fails without
shutdown_ray_cluster() ends with its own error instead of waiting for Ray on Spark's threads; `trainrun ray` names
docker's default /dev/shm in one line; on executors of placeholder GPUs, as the local pool's workers offer them, each
Ray worker node gets the GPU Spark assigned its executor."""
import json
import time

import pytest

from trainrun.backends.spark.pool_daemon import gpu_env
from trainrun.image_contract import DISCOVERY_SCRIPT_PATH

pytestmark = pytest.mark.timeout(600)


def test_a_ray_cluster_on_spark_refuses_whoever_lacks_its_token_and_a_failed_driver_ends(in_image):
    exit_code, output = in_image.run_status(["python", "/units/ray_on_spark_checks.py"], timeout=400)
    ended_at = time.time()
    checks = json.loads(next(line for line in output.splitlines() if line.startswith('{"without_token"')))
    assert (checks["without_token"], checks["with_token"]) == (401, 200), checks
    assert checks["client_exit"] != 0, checks
    assert not checks["token_in_ray_logs"], checks
    assert exit_code == 1 and "ValueError: the user's training failed" in output, output[-3000:]
    assert ended_at - checks["failing_at"] < 60, checks


def test_trainrun_ray_in_docker_s_default_dev_shm_names_it_in_one_line_and_still_runs_the_driver(in_image):
    """docker's default 64 MiB /dev/shm: one warning line naming it and --shm-size, then the driver runs."""
    driver = "import ray; ray.init(); print('cpus', ray.cluster_resources()['CPU'])"
    output = in_image.run(["trainrun", "ray", "--num-cpus", "1", "python", "-c", driver], timeout=240,
                          options={"shm_size": "64m"})
    warnings = [line for line in output.splitlines() if "/dev/shm on " in line]
    assert len(warnings) == 1 and "is 64 MiB" in warnings[0] and "--shm-size" in warnings[0], output[-3000:]
    assert "cpus 1.0" in output, output[-3000:]


@pytest.mark.long  # a minute; CI keeps Ray on Spark's workflow row and the token test
def test_ray_on_spark_gives_each_worker_node_the_gpu_spark_assigned_its_executor(in_image):
    """Two local-cluster workers of one placeholder GPU each, with the environment the local pool's and an
    allocation's workers get (pool_daemon.gpu_env, here the container's, which local-cluster's workers and their
    executors inherit): each Ray worker node has that GPU, and a task asking for one sees the address Spark
    assigned."""
    confs = ["spark.task.resource.gpu.amount=1",
             *(f"spark.{side}.resource.gpu.{key}" for side in ("worker", "executor")
               for key in ("amount=1", f"discoveryScript={DISCOVERY_SCRIPT_PATH}"))]
    output = in_image.run(["spark-submit", "--master", "local-cluster[2,1,1024]",
                           *(word for conf in confs for word in ("--conf", conf)), "/units/ray_gpu_nodes.py"],
                          timeout=400, env=gpu_env(1, 0, placeholder=True), options={"shm_size": "1g"})
    result = json.loads(next(line for line in output.splitlines() if line.startswith('{"worker_node_gpus"')))
    assert result["worker_node_gpus"] == [1.0, 1.0], result
    assert result["given"] == [{"gpu_ids": ["0"], "cuda_visible_devices": "0"}] * 2, result
