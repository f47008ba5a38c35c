"""What the images add to Ray on Spark (trainrun.backends.spark.ray_on_spark): the sizes the image's patch of
setup_ray_cluster passes on for each one the user left unset, and the start hook's token authentication."""
import pytest

from trainrun.backends.spark.ray_on_spark import WorkerNodeSizes, authentication_env, executor_cores, sized

GiB = 1024 ** 3
UNSET = WorkerNodeSizes(None, None, None, None)


def test_a_local_cluster_executor_gives_its_cores_and_no_more_than_its_memory():
    node = sized(UNSET, master="local-cluster[2,2,2048]", conf={}, executor_memory_bytes=2 * GiB, registered_cores=[])
    assert (node.num_cpus, node.num_gpus) == (2, 0)
    assert node.heap_memory + node.object_store_memory == int(2 * GiB * 0.8)
    assert node.object_store_memory == int(2 * GiB * 0.8 * 0.3)


def test_spark_executor_cores_and_gpus_come_from_the_conf():
    conf = {"spark.executor.cores": "4", "spark.executor.resource.gpu.amount": "2"}
    node = sized(UNSET, master="spark://m:7077", conf=conf, executor_memory_bytes=8 * GiB, registered_cores=[16])
    assert (node.num_cpus, node.num_gpus) == (4, 2)


def test_a_standalone_executor_without_spark_executor_cores_takes_what_the_registered_executors_have():
    assert executor_cores({}, "spark://m:7077", [3, 2]) == 2
    assert executor_cores({}, "spark://m:7077", []) is None
    node = sized(UNSET, master="spark://m:7077", conf={}, executor_memory_bytes=GiB, registered_cores=[])
    assert (node.num_cpus, node.num_gpus) == (None, None)  # Ray's own reading, as before


def test_what_the_user_passed_is_kept():
    given = WorkerNodeSizes(1, 0, 512 * 1024 ** 2, 256 * 1024 ** 2)
    assert sized(given, master="local-cluster[2,2,2048]", conf={}, executor_memory_bytes=2 * GiB,
                 registered_cores=[]) == given


@pytest.mark.parametrize("given", [WorkerNodeSizes(1, None, None, None), WorkerNodeSizes(None, 0, None, None)])
def test_cpus_without_gpus_or_gpus_without_cpus_stay_for_ray_to_refuse(given):
    node = sized(given, master="local-cluster[2,2,2048]", conf={}, executor_memory_bytes=2 * GiB, registered_cores=[])
    assert (node.num_cpus, node.num_gpus) == (given.num_cpus, given.num_gpus)


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]"])
def test_local_mode_is_left_to_ray(master):
    assert sized(UNSET, master=master, conf={}, executor_memory_bytes=GiB, registered_cores=[]) == UNSET


def test_every_process_of_a_ray_cluster_gets_token_mode_and_one_new_token():
    assert authentication_env({}, new_token=lambda: "new") == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "new"}
    assert authentication_env({"RAY_AUTH_MODE": "TOKEN"}, new_token=lambda: "new")["RAY_AUTH_TOKEN"] == "new"


def test_a_token_the_user_gave_is_kept_and_another_mode_leaves_authentication_to_ray():
    assert authentication_env({"RAY_AUTH_TOKEN": "mine"})["RAY_AUTH_TOKEN"] == "mine"
    assert authentication_env({"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN": "mine"}) == {}
