"""first(), take() and show() of a DataFrame made from local rows: Spark stops reading the Python worker that
serializes them once it has its rows, and the worker's last flush meets a closed socket. Unpatched, PySpark's daemon
printed a BrokenPipeError traceback for each (images/patches/pyspark-4.3.0-daemon-closed-reader.patch)."""
import numpy as np
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[2]").appName("trainstack-closed-reader").getOrCreate()
# As the horovod.spark estimator examples make their data: rows large enough that the task does not fit one read.
rng = np.random.default_rng(0)
frame = spark.createDataFrame([(Vectors.dense(rng.random(784)), float(i % 10)) for i in range(3000)],
                              ["features", "label"])
assert frame.first()["label"] == 0.0
assert len(frame.take(5)) == 5
frame.show(2)
print(f"closed reader ok: {frame.count()} rows", flush=True)
spark.stop()
