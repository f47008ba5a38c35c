"""Ray Tune: four trials of the digits model, one learning rate each, as a Ray driver writes it. `ray.init()`
connects to the cluster RAY_ADDRESS names, which `trainrun ray` starts where the job is; the trials run as many at
once as the cluster has CPUs, one CPU each.

    trainrun ray python ray_tune_mnist.py
    trainrun ray --master local-cluster[2,2,2048] python ray_tune_mnist.py

The driver prints a JSON summary line: each trial's learning rate, status and accuracy, and the best trial's.
Results go to --storage-path (Ray's default ~/ray_results), which every node must see.
"""
import argparse
import json
import os

import ray
from ray import tune

LEARNING_RATES = [0.002, 0.01, 0.04, 0.1]


def train_digits(config):
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from digit_net import DigitNet
    from synthetic_digits import make_digits

    torch.manual_seed(42)
    torch.set_num_threads(1)
    images, labels = make_digits(3000, seed=0)
    loader = DataLoader(TensorDataset(torch.from_numpy(images), torch.from_numpy(labels)), batch_size=32, shuffle=True)
    test_images, test_labels = make_digits(1000, seed=1)
    model = DigitNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    for epoch in range(config["epochs"]):
        total = 0.0
        for batch_images, batch_labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch_images), batch_labels)
            loss.backward()
            optimizer.step()
            total += loss.item()
        with torch.no_grad():
            predictions = model(torch.from_numpy(test_images)).argmax(dim=1)
        accuracy = (predictions == torch.from_numpy(test_labels)).float().mean().item()
        tune.report({"epoch": epoch + 1, "loss": total / len(loader), "accuracy": accuracy})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--storage-path", default=os.path.expanduser("~/ray_results"))
    args = parser.parse_args()
    ray.init()
    tuner = tune.Tuner(
        tune.with_resources(train_digits, {"cpu": 1}),
        param_space={"lr": tune.grid_search(LEARNING_RATES), "epochs": args.epochs},
        tune_config=tune.TuneConfig(metric="accuracy", mode="max"),
        run_config=tune.RunConfig(storage_path=args.storage_path))
    results = tuner.fit()
    trials = [{"lr": result.config["lr"], "accuracy": (result.metrics or {}).get("accuracy"),
               "error": str(result.error or "")}
              for result in results]
    best = results.get_best_result()
    print(json.dumps({"workflow": "ray-tune", "trials": trials,
                      "best": {"lr": best.config["lr"], "accuracy": best.metrics["accuracy"]}}), flush=True)


if __name__ == "__main__":
    main()
