"""PySpark's TorchDistributor (local_mode=False on local[2], as examples/torch_distributor_mnist.py runs it) training
a torch.compile'd DistributedDataParallel model one step; each rank checks it against eager, rank 0's line returns."""
import os

from pyspark.ml.torch.distributor import TorchDistributor
from pyspark.sql import SparkSession

UNITS = os.path.dirname(os.path.abspath(__file__))


def train_fn() -> str:
    import torch
    import torch.distributed as dist

    from compile_reference import LEARNING_RATE, check_distributed_step, compiled_ddp, make_model

    dist.init_process_group("gloo")
    model = compiled_ddp(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    line = check_distributed_step(model, model, optimizer, dist.get_rank(), dist.get_world_size())
    dist.barrier()
    dist.destroy_process_group()
    return line


# compile_reference must be importable by the processes torchrun starts in the executors.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [UNITS, os.environ.get("PYTHONPATH")]))
spark = (SparkSession.builder.master("local[2]").appName("torch-distributor-compile")
         .config("spark.executorEnv.PYTHONPATH", UNITS).getOrCreate())
print("distributor", TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(train_fn), flush=True)
spark.stop()
