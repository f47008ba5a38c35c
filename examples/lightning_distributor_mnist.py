"""PyTorch Lightning under PySpark's TorchDistributor, the way Databricks' guide distributes a Lightning Trainer.

    python lightning_distributor_mnist.py [--master URL] [--local-mode]

`TorchDistributor(num_processes=2, local_mode=..., use_gpu=False).run(train_fn, ...)`: the function holds its
imports and fits examples/lightning_mnist.py's module with `Trainer(strategy="ddp", devices=..., num_nodes=...)`.
In local mode torchrun starts both ranks on the driver: one node of 2 devices. Otherwise each Spark task starts
torchrun with one rank (on local-cluster[2,1,1024], each in its own executor): 2 nodes of 1 device, as Databricks'
examples write it (devices=NUM_PROC_PER_TASK, num_nodes=NUM_TASKS). The distributor returns rank 0's summary, which
the driver prints as the JSON summary line.
"""
import argparse
import json
import os

from pyspark.ml.torch.distributor import TorchDistributor
from pyspark.sql import SparkSession

HERE = os.path.dirname(os.path.abspath(__file__))
NUM_PROCESSES = 2


def train_fn(lr: float, epochs: int, devices: int, num_nodes: int) -> dict:
    from lightning_mnist import train

    return train(lr, epochs, batch_size=32, train_size=3000, checkpoint_dir="/tmp/checkpoints", devices=devices,
                 num_nodes=num_nodes)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", default=os.environ.get("MASTER", "local[2]"),
                        help="Spark master (default: $MASTER, which spark-submit reads too, else local[2])")
    parser.add_argument("--local-mode", action="store_true")
    args = parser.parse_args()

    # The helper modules train_fn imports must be on the path of the processes torchrun starts: on the driver in
    # local mode, in the executors otherwise (every container of the image has them at HERE).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
    spark = (SparkSession.builder.master(args.master).appName("lightning-distributor-example")
             .config("spark.executorEnv.PYTHONPATH", HERE).getOrCreate())
    devices, num_nodes = (NUM_PROCESSES, 1) if args.local_mode else (1, NUM_PROCESSES)
    distributor = TorchDistributor(num_processes=NUM_PROCESSES, local_mode=args.local_mode, use_gpu=False)
    result = distributor.run(train_fn, 0.04, 3, devices, num_nodes)
    print(json.dumps({**result, "workflow": "lightning-distributor", "local_mode": args.local_mode}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
