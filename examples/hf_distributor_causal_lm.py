"""Hugging Face's Trainer under PySpark's TorchDistributor, the way Databricks' guide distributes it.

    python hf_distributor_causal_lm.py [--master URL] [--local-mode] [--deepspeed ds.json]

`TorchDistributor(num_processes=2, local_mode=..., use_gpu=False).run(train_fn, ...)`: the function holds its
imports and trains examples/hf_causal_lm.py's tiny GPT-2 on every rank; with --deepspeed the Trainer runs DeepSpeed
ZeRO from the config file (`TrainingArguments(deepspeed=PATH)`). The distributor returns rank 0's summary, which the
driver prints as the JSON summary line.
"""
import argparse
import json
import os

from pyspark.ml.torch.distributor import TorchDistributor
from pyspark.sql import SparkSession

HERE = os.path.dirname(os.path.abspath(__file__))


def train_fn(epochs: int, deepspeed_config: str | None) -> dict:
    from hf_causal_lm import arguments, train

    options = ["--epochs", str(epochs), "--checkpoint-dir", "/tmp/checkpoints"]
    if deepspeed_config:
        options += ["--deepspeed", deepspeed_config]
    return train(arguments().parse_args(options))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", default=os.environ.get("MASTER", "local[2]"),
                        help="Spark master (default: $MASTER, which spark-submit reads too, else local[2])")
    parser.add_argument("--local-mode", action="store_true")
    parser.add_argument("--deepspeed", help="a DeepSpeed config file, e.g. deepspeed_zero2.json")
    args = parser.parse_args()

    # The helper modules train_fn imports must be on the path of the processes torchrun starts: on the driver in
    # local mode, in the executors otherwise (every container of the image has them at HERE).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
    spark = (SparkSession.builder.master(args.master).appName("hf-distributor-example")
             .config("spark.executorEnv.PYTHONPATH", HERE).getOrCreate())
    distributor = TorchDistributor(num_processes=2, local_mode=args.local_mode, use_gpu=False)
    result = distributor.run(train_fn, 3, args.deepspeed)
    print(json.dumps({**result, "workflow": "hf-trainer-distributor", "local_mode": args.local_mode}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
