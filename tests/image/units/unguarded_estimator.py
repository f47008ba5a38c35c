"""The Synapse TorchEstimator tutorial pasted from a notebook into a script: no
`if __name__ == "__main__":` guard. Horovod starts helper processes with multiprocessing's spawn,
which re-runs an unguarded script in each of them."""
import horovod.spark.torch as hvd_spark
import torch
from horovod.spark.common.backend import SparkBackend
from horovod.spark.common.store import LocalStore
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[2]").appName("unguarded-estimator").getOrCreate()
rows = [(Vectors.dense([float(i % 7), float(i % 5)]), float(i % 7 > i % 5)) for i in range(256)]
df = spark.createDataFrame(rows, ["features", "label"])
model = torch.nn.Sequential(torch.nn.Linear(2, 1))
estimator = hvd_spark.TorchEstimator(
    backend=SparkBackend(num_proc=2), store=LocalStore("/tmp/unguarded-store"),
    model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
    loss=lambda outputs, labels: torch.nn.functional.mse_loss(outputs, labels.float().reshape(-1, 1)),
    input_shapes=[[-1, 2]], feature_cols=["features"], label_cols=["label"], batch_size=32, epochs=1,
    partitions_per_process=1, verbose=0)
fitted = estimator.fit(df)
print(f"unguarded estimator trained: {len(fitted.getHistory())} epoch", flush=True)
spark.stop()
