"""Ray on Spark as Databricks' guide writes it: `setup_ray_cluster(max_worker_nodes=2)` on the Spark application's
executors, then Ray Train's TorchTrainer with two workers on the synthetic digits.

    spark-submit --master 'local-cluster[2,2,2048]' ray_on_spark_mnist.py

Each Ray worker node runs in one executor's task and is sized as that executor (its cores, and its memory less Ray's
buffer), not as the host. The Ray cluster is shut down however the training ends. The driver prints a JSON summary
line: each worker node's CPUs and memory as `ray.nodes()` gives them, the losses and the accuracy.
"""
import json
import os
import tempfile

import ray
import ray.train
import ray.train.torch
from pyspark.sql import SparkSession
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.util.spark import setup_ray_cluster, shutdown_ray_cluster


def train_loop_per_worker(config):
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from digit_net import DigitNet
    from synthetic_digits import make_digits

    torch.manual_seed(42)
    torch.set_num_threads(1)
    images, labels = make_digits(3000, seed=0)
    loader = ray.train.torch.prepare_data_loader(
        DataLoader(TensorDataset(torch.from_numpy(images), torch.from_numpy(labels)), batch_size=32, shuffle=True))
    model = ray.train.torch.prepare_model(DigitNet())
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    losses = []
    for epoch in range(config["epochs"]):
        if ray.train.get_context().get_world_size() > 1:
            loader.sampler.set_epoch(epoch)
        total = 0.0
        for batch_images, batch_labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch_images), batch_labels)
            loss.backward()
            optimizer.step()
            total += loss.item()
        losses.append(total / len(loader))
    test_images, test_labels = make_digits(1000, seed=1)
    with torch.no_grad():
        predictions = model(torch.from_numpy(test_images)).argmax(dim=1)
    accuracy = (predictions == torch.from_numpy(test_labels)).float().mean().item()
    metrics = {"ranks": ray.train.get_context().get_world_size(), "losses": losses, "accuracy": accuracy}
    # Ray Train reports a run's metrics with a checkpoint (Result.metrics is None without one).
    with tempfile.TemporaryDirectory() as folder:
        if ray.train.get_context().get_world_rank() == 0:
            torch.save(model.state_dict(), os.path.join(folder, "model.pt"))
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))
        else:
            ray.train.report(metrics)


def main():
    spark = SparkSession.builder.appName("ray-on-spark-mnist").getOrCreate()
    setup_ray_cluster(max_worker_nodes=2)
    try:
        ray.init()
        worker_nodes = [{"cpus": node["Resources"].get("CPU", 0), "memory": node["Resources"]["memory"],
                         "object_store_memory": node["Resources"]["object_store_memory"]}
                        for node in ray.nodes() if node["Alive"] and node["Resources"].get("CPU", 0) > 0]
        trainer = TorchTrainer(train_loop_per_worker, train_loop_config={"lr": 0.04, "epochs": 3},
                               scaling_config=ScalingConfig(num_workers=2),
                               run_config=RunConfig(storage_path=tempfile.mkdtemp(prefix="ray-results-")))
        result = trainer.fit()
        print(json.dumps({**result.metrics, "ray_worker_nodes": worker_nodes}), flush=True)
    finally:
        shutdown_ray_cluster()
        spark.stop()


if __name__ == "__main__":
    main()
