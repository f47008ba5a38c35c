"""Ray Train's TorchTrainer with two workers on the synthetic digits, as a Ray driver writes it: `ray.init()`
connects to the cluster RAY_ADDRESS names, which `trainrun ray` starts where the job is (this host, or inside salloc
or sbatch a head on the first node and a worker node on each other).

    trainrun ray python ray_train_mnist.py
    sbatch slurm/trainrun-ray.sbatch python ray_train_mnist.py --storage-path "$PWD/ray_results"

The driver prints a JSON summary line: the losses, the accuracy, the Ray node each rank ran on, and the cluster's
nodes as `ray.nodes()` gives them. Results and the checkpoint go to --storage-path (Ray's default ~/ray_results),
which every node must see.
"""
import argparse
import json
import os
import tempfile

import ray
import ray.train
import ray.train.torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


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
    # Where each rank ran: the Ray node of each, gathered across the ranks.
    node_ids = [None] * ray.train.get_context().get_world_size()
    torch.distributed.all_gather_object(node_ids, ray.get_runtime_context().get_node_id())
    metrics = {"ranks": ray.train.get_context().get_world_size(), "losses": losses, "accuracy": accuracy,
               "rank_nodes": node_ids}
    # Ray Train reports a run's metrics with a checkpoint (Result.metrics is None without one).
    with tempfile.TemporaryDirectory() as folder:
        if ray.train.get_context().get_world_rank() == 0:
            torch.save(model.state_dict(), os.path.join(folder, "model.pt"))
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))
        else:
            ray.train.report(metrics)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--storage-path", default=os.path.expanduser("~/ray_results"))
    args = parser.parse_args()
    ray.init()
    nodes = [{"cpus": node["Resources"].get("CPU", 0), "memory": node["Resources"]["memory"]}
             for node in ray.nodes() if node["Alive"]]
    trainer = TorchTrainer(train_loop_per_worker, train_loop_config={"lr": 0.04, "epochs": 3},
                           scaling_config=ScalingConfig(num_workers=args.num_workers),
                           run_config=RunConfig(storage_path=args.storage_path))
    result = trainer.fit()
    print(json.dumps({"workflow": "ray-train", **result.metrics, "ray_nodes": nodes}), flush=True)


if __name__ == "__main__":
    main()
