"""horovod.spark.run on a pool: a Gloo allreduce over two Spark tasks, one per worker.

Usage: python pool_horovod_spark.py spark://MASTER:7077
"""
import sys

import horovod.spark
from pyspark.sql import SparkSession


def allreduce():
    import socket

    import horovod.torch as hvd
    import torch

    hvd.init()
    total = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum)
    return hvd.rank(), socket.gethostname(), total.item()


spark = (SparkSession.builder.master(sys.argv[1]).appName("horovod-spark")
         .config("spark.executor.cores", "2").config("spark.executor.memory", "1g")
         # A task takes both cores of an executor, so the two ranks land on different workers.
         .config("spark.task.cpus", "2")
         .getOrCreate())
for rank, host, total in horovod.spark.run(allreduce, num_proc=2, use_gloo=True, start_timeout=120):
    print(f"horovod.spark rank {rank} on {host} allreduce={total}", flush=True)
spark.stop()
