"""Ray on Spark on executors of placeholder GPUs: setup_ray_cluster(max_worker_nodes=2), then one task per worker node
asking for a GPU. Prints each Ray node's GPUs and what each task was given (ray.get_gpu_ids, CUDA_VISIBLE_DEVICES)."""
import json
import os

import ray
from pyspark.sql import SparkSession
from ray.util.spark import setup_ray_cluster, shutdown_ray_cluster


@ray.remote(num_gpus=1)
def gpus_given() -> dict:
    return {"gpu_ids": ray.get_gpu_ids(), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def main() -> None:
    SparkSession.builder.getOrCreate()
    setup_ray_cluster(max_worker_nodes=2)
    ray.init()
    worker_nodes = [node["Resources"].get("GPU", 0) for node in ray.nodes()
                    if node["Alive"] and node["Resources"].get("CPU", 0) > 0]
    given = ray.get([gpus_given.remote() for _ in worker_nodes])
    print(json.dumps({"worker_node_gpus": worker_nodes, "given": given}), flush=True)
    shutdown_ray_cluster()


if __name__ == "__main__":
    main()
