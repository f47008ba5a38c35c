"""horovod.spark's TorchEstimator on a Spark DataFrame, as Databricks Runtime ML's Horovod
estimator examples use it: fit on a DataFrame of images, transform held-out images, score them.

    python horovod_spark_estimator_mnist.py [--master URL] [--store DIR] [--epochs N]

The DataFrame holds MNIST-shaped images as DenseVector features and a double label. The estimator
trains with 2 Horovod processes (Gloo) inside Spark tasks, reading the data it wrote to a local
Store; rank 0 alone writes the checkpoint there. In trainstack images Horovod reads that data with
pyarrow (Horovod's ArrowDataModule, from our patch), since petastorm does not work with current pyarrow.
"""
import argparse
import json
import os

import cloudpickle
import numpy as np
import pyspark.sql.types as T
import torch
import torch.nn.functional as F
from pyspark.ml.evaluation import MulticlassClassificationEvaluator
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf

import digit_net
from synthetic_digits import make_digits

HERE = os.path.dirname(os.path.abspath(__file__))


def digits_frame(spark: SparkSession, count: int, seed: int):
    images, labels = make_digits(count, seed)
    rows = [(Vectors.dense(image.reshape(-1).astype(float)), float(label)) for image, label in zip(images, labels)]
    return spark.createDataFrame(rows, ["features", "label"])


def cross_entropy(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, labels.long())


def world_size(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """A metric that is the number of ranks: averaged over every rank, it proves they all trained."""
    import horovod.torch as hvd

    return torch.tensor(float(hvd.size()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", default=os.environ.get("MASTER", "local[2]"),
                        help="Spark master (default: $MASTER, which spark-submit reads too, else local[2])")
    parser.add_argument("--store", default="/tmp/horovod-store")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.02)
    args = parser.parse_args()

    import horovod.spark.torch as hvd_spark
    from horovod.spark.common.backend import SparkBackend
    from horovod.spark.common.store import LocalStore

    # Horovod's ranks are processes that Spark tasks start, outside the Python path that addPyFile
    # gives Spark's own workers: the model's class travels with the pickled model instead.
    cloudpickle.register_pickle_by_value(digit_net)
    spark = SparkSession.builder.master(args.master).appName("horovod-spark-estimator-example").getOrCreate()
    for module in ("digit_net.py", "synthetic_digits.py"):
        spark.sparkContext.addPyFile(os.path.join(HERE, module))
    train_df = digits_frame(spark, 3000, seed=0)
    test_df = digits_frame(spark, 1000, seed=1)

    torch.manual_seed(42)
    model = digit_net.DigitNet()
    estimator = hvd_spark.TorchEstimator(
        backend=SparkBackend(num_proc=2, use_gloo=True),
        store=LocalStore(args.store),
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9),
        loss=cross_entropy,
        metrics=[[world_size]],  # one group, applied to every label column
        input_shapes=[[-1, 1, 28, 28]],
        feature_cols=["features"],
        label_cols=["label"],
        partitions_per_process=1,
        validation=0.1,
        batch_size=32,
        epochs=args.epochs,
        random_seed=42,
        verbose=1,
    )
    # A double label and a 10-unit output: transform writes the model's 10 scores to label_prob, and the predicted
    # class (a double, as Spark ML's prediction) to label_prob__prediction.
    torch_model = estimator.fit(train_df).setOutputCols(['label_prob'])

    store = estimator.getStore()
    run_dir = store.get_localized_path(store.get_checkpoint_path(torch_model.getRunId()))
    checkpoint = os.path.join(run_dir, store.get_checkpoint_filename())
    if os.path.exists(checkpoint):
        print(f"rank 0 wrote {checkpoint}", flush=True)  # Horovod's remote trainer saves on rank 0 only

    # Evaluated as Synapse's TorchEstimator tutorial and Horovod's Spark MNIST examples do: the argmax of the scores.
    pred_df = torch_model.transform(test_df)
    argmax = udf(lambda v: float(np.argmax(v)), returnType=T.DoubleType())
    pred_df = pred_df.withColumn('label_pred', argmax(pred_df.label_prob))
    evaluator = MulticlassClassificationEvaluator(predictionCol='label_pred', labelCol='label', metricName='accuracy')
    accuracy = evaluator.evaluate(pred_df)
    print('Test accuracy:', accuracy)
    # The same class, read from the column the estimator adds, without a UDF.
    prediction_accuracy = evaluator.setPredictionCol('label_prob__prediction').evaluate(pred_df)
    history = torch_model.getHistory()
    # all_metrics: one {metric name: average over ranks} per metric group; ours has one metric.
    (ranks,) = history[-1]["train"]["all_metrics"][0].values()
    print(json.dumps({"workflow": "horovod-spark-estimator", "ranks": round(ranks),
                      "losses": [epoch["train"]["loss"] for epoch in history], "accuracy": accuracy,
                      "prediction_accuracy": prediction_accuracy}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
