"""PySpark's DeepspeedTorchDistributor, called the way Databricks users call it.

    python deepspeed_distributor_mnist.py [--master URL] [--local-mode] [--script] [--zero-stage 2|3]

Function form: `DeepspeedTorchDistributor(numGpus=2, nnodes=1, localMode=..., useGpu=False,
deepspeedConfig=CONFIG_DICT).run(train_fn, epochs)`. The distributor writes the dict to a file and starts torchrun
with `--deepspeed --deepspeed_config FILE` after the function's own arguments, so the function reads the config
from sys.argv as a script would (deepspeed.add_config_arguments). Script form (`--script`): `.run(
"deepspeed_zero_mnist.py", "--checkpoint-dir=/tmp/checkpoints")` with the config as a file path. Either way the
training is examples/deepspeed_zero_mnist.py's; rank 0 prints the summary line.
"""
import argparse
import json
import os

from pyspark.ml.deepspeed.deepspeed_distributor import DeepspeedTorchDistributor
from pyspark.sql import SparkSession

HERE = os.path.dirname(os.path.abspath(__file__))


def deepspeed_config(zero_stage: int) -> dict:
    """ZeRO with torch's AdamW (nothing for DeepSpeed to compile on CPU); 32 samples per rank and step."""
    return {"train_micro_batch_size_per_gpu": 32, "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "torch_adam": True}},
            "zero_optimization": {"stage": zero_stage, "stage3_gather_16bit_weights_on_model_save": True},
            "steps_per_print": 1000000}


def train_fn(epochs: int) -> dict:
    import sys

    from deepspeed_zero_mnist import arguments, train

    # sys.argv ends with the distributor's `--deepspeed --deepspeed_config FILE`.
    args, _ = arguments().parse_known_args([*sys.argv[1:], "--epochs", str(epochs),
                                            "--checkpoint-dir", "/tmp/checkpoints"])
    summary = train(args)
    if summary["rank"] == 0:
        print(json.dumps(summary), flush=True)
    return summary


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", default=os.environ.get("MASTER", "local[2]"),
                        help="Spark master (default: $MASTER, which spark-submit reads too, else local[2])")
    parser.add_argument("--local-mode", action="store_true")
    parser.add_argument("--script", action="store_true")
    parser.add_argument("--zero-stage", type=int, default=3, choices=(2, 3))
    args = parser.parse_args()

    # The helper modules must be on the path of the processes torchrun starts: on the driver in local mode,
    # in the executors otherwise (every container of the image has them at HERE).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
    spark = (SparkSession.builder.master(args.master).appName("deepspeed-distributor-example")
             .config("spark.executorEnv.PYTHONPATH", HERE).getOrCreate())
    if args.script:
        config = os.path.join(HERE, f"deepspeed_zero{args.zero_stage}.json")
        distributor = DeepspeedTorchDistributor(numGpus=2, nnodes=1, localMode=args.local_mode, useGpu=False,
                                                deepspeedConfig=config)
        distributor.run(os.path.join(HERE, "deepspeed_zero_mnist.py"), "--checkpoint-dir=/tmp/checkpoints")
    else:
        distributor = DeepspeedTorchDistributor(numGpus=2, nnodes=1, localMode=args.local_mode, useGpu=False,
                                                deepspeedConfig=deepspeed_config(args.zero_stage))
        result = distributor.run(train_fn, 3)
        # Which rank's summary comes back is PySpark's business (rank 0's, once the image's PySpark patch lands).
        print(f"distributor returned the summary of rank {result['rank']}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
