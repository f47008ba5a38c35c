"""PySpark's distributors return rank 0's value, as PySpark documents (pyspark-4.3.0-distributor-rank0-output.patch),
and refuse GPUs they cannot have in one line (pyspark-4.3.0-distributor-whole-gpus.patch); DeepspeedTorchDistributor
checks its config on the driver (pyspark-4.3.0-deepspeed-config-check.patch); a training script that fails raises
(pyspark-4.3.0-script-exit-status.patch).

    python distributors.py torch-local | torch-local-lines | torch-barrier | torch-failing-script | deepspeed-local |
                           deepspeed-gpu-refusals | deepspeed-bad-config

Each run prints one JSON line. The training function returns its rank; every rank but 0 ends last, so a distributor
that kept the last writer's value would return another rank's.
"""
import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession

SUMMARY = "distributors "
LINES_PER_RANK = 500
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def rank_of_this_process(pause: float = 2.0) -> int:
    import os
    import time

    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    if rank != 0:
        time.sleep(pause)  # rank 0 writes first; any other writer would come after it
    dist.destroy_process_group()
    print(f"rank {rank} of {os.environ['WORLD_SIZE']} returns {rank} (rendezvous port {os.environ['MASTER_PORT']})",
          flush=True)
    return rank


def print_lines_at_once() -> int:
    """Both ranks print, from the same moment, LINES_PER_RANK lines of several pieces each, as users print."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    for step in range(LINES_PER_RANK):
        print("lines-probe rank", rank, "step", step, "loss", 0.25)
    dist.destroy_process_group()
    return rank


def deepspeed_rank(pause: float = 2.0) -> int:
    import time

    import deepspeed
    import torch.distributed as dist

    deepspeed.init_distributed(dist_backend="gloo")
    rank = dist.get_rank()
    dist.barrier()
    if rank != 0:
        time.sleep(pause)
    dist.destroy_process_group()
    print(f"deepspeed rank {rank} returns {rank}", flush=True)
    return rank


def refusal(make) -> str:
    try:
        make()
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return "not refused"


def main(case: str) -> dict:
    from pyspark.ml.torch.distributor import TorchDistributor

    builder = SparkSession.builder.master("local[2]").appName(f"distributors-{case}")
    if case == "torch-local":
        builder.getOrCreate()
        return {"returned": [TorchDistributor(num_processes=2, local_mode=True, use_gpu=False)
                             .run(rank_of_this_process) for _ in range(2)]}
    if case == "torch-local-lines":
        builder.getOrCreate()
        return {"returned": TorchDistributor(num_processes=2, local_mode=True, use_gpu=False)
                .run(print_lines_at_once), "lines_per_rank": LINES_PER_RANK}
    if case == "torch-barrier":
        builder.getOrCreate()
        return {"returned": [TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)
                             .run(rank_of_this_process)],
                "ephemeral_range": [int(port) for port in EPHEMERAL_RANGE.read_text().split()]}
    if case == "torch-failing-script":
        import tempfile

        builder.getOrCreate()
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
            script.write("import sys\nprint('the script fails', flush=True)\nsys.exit(3)\n")
        try:
            returned = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(script.name)
        except RuntimeError as error:
            return {"raised": str(error).splitlines()[0]}
        return {"raised": None, "returned": returned}

    from pyspark.ml.deepspeed.deepspeed_distributor import DeepspeedTorchDistributor

    if case == "deepspeed-local":
        builder.getOrCreate()
        config = {"train_batch_size": 8, "zero_optimization": {"stage": 2}}
        return {"returned": [DeepspeedTorchDistributor(numGpus=2, nnodes=1, localMode=True, useGpu=False,
                                                       deepspeedConfig=config).run(deepspeed_rank)
                             for _ in range(2)]}
    if case == "deepspeed-gpu-refusals":
        # A pool template's fractional GPU per task, as pooltemplates renders it into the session's conf.
        builder.config("spark.executor.resource.gpu.amount", "1") \
            .config("spark.task.resource.gpu.amount", "0.5").getOrCreate()
        return {
            "local_without_gpus": refusal(lambda: DeepspeedTorchDistributor(numGpus=2, localMode=True, useGpu=True)),
            "fractional_task_gpus": refusal(
                lambda: DeepspeedTorchDistributor(numGpus=1, nnodes=2, localMode=False, useGpu=True)),
            "torch_fractional_task_gpus": refusal(
                lambda: TorchDistributor(num_processes=2, local_mode=False, use_gpu=True)),
        }
    if case == "deepspeed-bad-config":
        from trainrun.errors import TrainrunError

        builder.getOrCreate()
        config = {"train_batch_size": 8, "zero_optimization": {"stage": 4}}
        try:
            DeepspeedTorchDistributor(numGpus=2, localMode=True, useGpu=False, deepspeedConfig=config)
        except TrainrunError as error:
            return {"refused": str(error)}
        return {"refused": "not refused"}
    raise SystemExit(f"unknown case {case!r}")


if __name__ == "__main__":
    result = main(sys.argv[1])
    print(SUMMARY + json.dumps(result), flush=True)
    SparkSession.active().stop()
