"""A classifier with a sparse loss and a scalar label column trains through horovod.spark's
KerasEstimator (horovod-0.28.1-keras-sparse-labels.patch), with whichever Keras `tf.keras` is
(TF_USE_LEGACY_KERAS=1 for Keras 2); a label reshape that would change the number of rows is refused.

Prints one JSON line: the sparse-loss forms recognised, the held-out accuracy (of the model, and of transform's output
column) and the refusals' messages.
"""
import json

import numpy as np
import tensorflow as tf
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession

import horovod.spark.keras as hvd_spark
from horovod.spark.common.backend import SparkBackend
from horovod.spark.common.store import LocalStore
from horovod.spark.keras.labels import is_sparse_loss

SPARSE_LOSSES = {
    "name": "sparse_categorical_crossentropy",
    "class name": "SparseCategoricalCrossentropy",
    "loss object": tf.keras.losses.SparseCategoricalCrossentropy(),
    "loss function": tf.keras.losses.sparse_categorical_crossentropy,
}
DENSE_LOSSES = {
    "name": "categorical_crossentropy",
    "loss object": tf.keras.losses.CategoricalCrossentropy(),
    "loss function": tf.keras.losses.categorical_crossentropy,
}


def two_blobs(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Points around (-1, -1) labelled 0 and around (1, 1) labelled 1."""
    labels = rng.integers(0, 2, count)
    points = rng.normal(0.0, 0.6, (count, 2)) + (2.0 * labels[:, None] - 1.0)
    return points, labels


def classifier() -> tf.keras.Model:
    return tf.keras.Sequential([
        tf.keras.layers.Input(shape=(2,)),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(2, activation="softmax"),
    ])


def estimator(store: LocalStore, loss, label_shapes=None, label="label") -> hvd_spark.KerasEstimator:
    return hvd_spark.KerasEstimator(
        backend=SparkBackend(num_proc=2, use_gloo=True), store=store, model=classifier(),
        optimizer=tf.keras.optimizers.Adam(learning_rate=0.01), loss=loss, metrics=["accuracy"],
        feature_cols=["features"], label_cols=[label], label_shapes=label_shapes, validation=0.1,
        batch_size=64, epochs=3, random_seed=1, partitions_per_process=2, verbose=0)


def refusal(store: LocalStore, frame, loss, label_shapes=None, label="label") -> str:
    """The refusal's line naming the column (the driver's ValueError), or the start of the error that reports
    a rank's failure (a vector column's length is known only in the ranks, which print the message)."""
    try:
        estimator(store, loss, label_shapes, label).fit(frame)
    except Exception as error:
        lines = [line.strip() for line in str(error).splitlines() if f"label column '{label}'" in line]
        return lines[0] if lines else f"{type(error).__name__}: {str(error)[-500:]}"
    return "not refused"


def main() -> None:
    rng = np.random.default_rng(0)
    points, labels = two_blobs(rng, 2000)
    held_out_points, held_out_labels = two_blobs(rng, 500)

    spark = SparkSession.builder.master("local[2]").appName("keras-sparse-labels").getOrCreate()
    # A double label, as Spark ML's StringIndexer gives it.
    frame = spark.createDataFrame([(Vectors.dense(point), float(label), Vectors.dense(np.eye(2)[label]))
                                   for point, label in zip(points, labels)], ["features", "label", "label_vec"])
    store = LocalStore("/tmp/keras-sparse-labels-store")

    tf.keras.utils.set_random_seed(1)
    fitted = estimator(store, "sparse_categorical_crossentropy").fit(frame)
    predicted = fitted.getModel().predict(held_out_points, verbose=0).argmax(axis=1)
    # transform's output column holds the 2-unit output and label__output__prediction the predicted class
    # (horovod-0.28.1-estimator-predictions.patch): each read as users read it.
    held_out = spark.createDataFrame([(Vectors.dense(point), float(label))
                                      for point, label in zip(held_out_points, held_out_labels)], ["features", "label"])
    transformed = fitted.transform(held_out).collect()

    print("keras-sparse-labels " + json.dumps({
        "keras": getattr(tf.keras, "__version__", "2"),
        "sparse": {form: is_sparse_loss(loss) for form, loss in SPARSE_LOSSES.items()},
        "dense": {form: is_sparse_loss(loss) for form, loss in DENSE_LOSSES.items()},
        "accuracy": float((predicted == held_out_labels).mean()),
        "transform_accuracy": float(np.mean([float(np.argmax(row["label__output"])) == row["label"]
                                             for row in transformed])),
        "prediction_accuracy": float(np.mean([row["label__output__prediction"] == row["label"]
                                              for row in transformed])),
        "dense_loss_refused": refusal(store, frame, "categorical_crossentropy"),
        "label_shapes_refused": refusal(store, frame, "sparse_categorical_crossentropy", [[-1, 2]]),
        # One-hot vectors under a sparse loss: [-1] would make 2 rows of each. A store of its own, as Horovod
        # reuses a store's prepared data whatever the label column.
        "vector_label_refused": refusal(LocalStore("/tmp/keras-sparse-labels-vector-store"), frame,
                                        "sparse_categorical_crossentropy", label="label_vec"),
    }), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
