"""horovod.spark's KerasEstimator on a Spark DataFrame, as Databricks Runtime ML's Horovod estimator
examples use it: fit on a DataFrame of images, transform held-out images, score them.

    python horovod_spark_keras_estimator_mnist.py [--master URL] [--store DIR] [--epochs N]

It runs with whichever Keras `tf.keras` is: Keras 3 by default, Keras 2 with TF_USE_LEGACY_KERAS=1.
The DataFrame holds MNIST-shaped images as DenseVector features, a double label and its one-hot
vector, which the model learns (as Horovod's Keras Spark example does). The estimator trains with
2 Horovod processes (Gloo) inside Spark tasks, reading the data it wrote to a local Store; rank 0
alone writes the checkpoint there. In trainstack images Horovod reads that data with pyarrow (our
patch's ArrowDataModule), since petastorm does not work with current pyarrow.
"""
import argparse
import json
import os

import numpy as np
import tensorflow as tf
from pyspark.ml.evaluation import MulticlassClassificationEvaluator
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession
from pyspark.sql import functions as sql
from pyspark.sql import types

from digit_keras_net import digit_keras_net
from synthetic_digits import make_digits

HERE = os.path.dirname(os.path.abspath(__file__))


def digits_frame(spark: SparkSession, count: int, seed: int):
    images, labels = make_digits(count, seed)
    rows = [(Vectors.dense(image.reshape(-1).astype(float)), float(label), Vectors.dense(np.eye(10)[label]))
            for image, label in zip(images, labels)]
    return spark.createDataFrame(rows, ["features", "label", "label_vec"])


def world_size(labels, logits):
    """A metric that is the number of ranks: averaged over every rank, it proves they all trained."""
    import horovod.tensorflow.keras as hvd

    return tf.fill(tf.shape(labels)[:1], float(hvd.size()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", default=os.environ.get("MASTER", "local[2]"),
                        help="Spark master (default: $MASTER, which spark-submit reads too, else local[2])")
    parser.add_argument("--store", default="/tmp/horovod-keras-store")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.002)
    args = parser.parse_args()

    import horovod.spark.keras as hvd_spark
    from horovod.spark.common.backend import SparkBackend
    from horovod.spark.common.store import LocalStore

    spark = SparkSession.builder.master(args.master).appName("horovod-spark-keras-estimator-example").getOrCreate()
    train_df = digits_frame(spark, 3000, seed=0)
    test_df = digits_frame(spark, 1000, seed=1)

    tf.keras.utils.set_random_seed(42)
    estimator = hvd_spark.KerasEstimator(
        backend=SparkBackend(num_proc=2, use_gloo=True),
        store=LocalStore(args.store),
        model=digit_keras_net(),
        optimizer=tf.keras.optimizers.Adam(learning_rate=args.lr),
        loss=tf.keras.losses.CategoricalCrossentropy(from_logits=True),
        metrics=[tf.keras.metrics.CategoricalAccuracy(name="accuracy"), world_size],
        custom_objects={"world_size": world_size},  # the ranks load the compiled model, metrics and all
        feature_cols=["features"],
        label_cols=["label_vec"],  # the model's output column has the label column's type: a vector
        validation=0.1,
        batch_size=32,
        epochs=args.epochs,
        random_seed=42,
        verbose=2,  # a line per epoch
    )
    keras_model = estimator.fit(train_df).setOutputCols(["label_prob"])

    store = estimator.getStore()
    run_dir = store.get_localized_path(store.get_checkpoint_path(keras_model.getRunId()))
    checkpoints = [name for name in os.listdir(run_dir) if name.startswith(store.get_checkpoint_filename())]
    for checkpoint in checkpoints:
        print(f"rank 0 wrote {os.path.join(run_dir, checkpoint)}", flush=True)  # Horovod's remote trainer saves on rank 0 only

    argmax = sql.udf(lambda logits: float(np.argmax(logits)), types.DoubleType())
    predictions = keras_model.transform(test_df).withColumn("label_pred", argmax("label_prob"))
    accuracy = MulticlassClassificationEvaluator(predictionCol="label_pred", labelCol="label",
                                                 metricName="accuracy").evaluate(predictions)
    history = keras_model.getHistory()
    print(json.dumps({"workflow": "horovod-spark-keras-estimator", "keras": getattr(tf.keras, "__version__", "2"),
                      "ranks": round(history["world_size"][-1]), "losses": [float(loss) for loss in history["loss"]],
                      "accuracy": accuracy}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
