"""Ray on Spark as Databricks' guide writes it: `setup_ray_cluster(max_worker_nodes=2)` on the Spark application's
executors, then Ray Train's TorchTrainer with two workers on the synthetic digits (ray_train_mnist.py's training
function).

    spark-submit --master 'local-cluster[2,2,2048]' ray_on_spark_mnist.py [--storage-path SHARED_FOLDER]

Each Ray worker node runs in one executor's task and is sized as that executor (its cores, and its memory less Ray's
buffer), not as the host. The Ray cluster is shut down however the training ends. The driver prints a JSON summary
line: each worker node's CPUs and memory as `ray.nodes()` gives them, the losses and the accuracy.
"""
import argparse
import json
import tempfile

import ray
from pyspark.sql import SparkSession
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.util.spark import setup_ray_cluster, shutdown_ray_cluster

from ray_train_mnist import train_loop_per_worker


def main():
    parser = argparse.ArgumentParser()
    # Where Ray Train writes results and checkpoints, which every worker node must see (Databricks: a /dbfs path).
    parser.add_argument("--storage-path", default=tempfile.mkdtemp(prefix="ray-results-"))
    args = parser.parse_args()
    spark = SparkSession.builder.appName("ray-on-spark-mnist").getOrCreate()
    setup_ray_cluster(max_worker_nodes=2)
    try:
        ray.init()
        worker_nodes = [{"cpus": node["Resources"].get("CPU", 0), "memory": node["Resources"]["memory"],
                         "object_store_memory": node["Resources"]["object_store_memory"]}
                        for node in ray.nodes() if node["Alive"] and node["Resources"].get("CPU", 0) > 0]
        trainer = TorchTrainer(train_loop_per_worker, train_loop_config={"lr": 0.04, "epochs": 3},
                               scaling_config=ScalingConfig(num_workers=2),
                               run_config=RunConfig(storage_path=args.storage_path))
        result = trainer.fit()
        print(json.dumps({**result.metrics, "ray_worker_nodes": worker_nodes}), flush=True)
    finally:
        shutdown_ray_cluster()
        spark.stop()


if __name__ == "__main__":
    main()
