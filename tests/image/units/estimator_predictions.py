"""What horovod.spark's KerasModel and TorchModel write for a scalar label column
(horovod-0.28.1-estimator-predictions.patch): with a multi-unit output, the predicted class (argmax) in the label's
type, and the output's values in `<output col>__rawPrediction`; with a one-unit output, that unit's value.

Each estimator fits two separable blobs on 2 Horovod processes and transforms held-out points. Prints one JSON line:
for each case, the accuracy of the output column against the labels, its Spark type, and the raw prediction column.
TensorFlow's case is left out where the image has no TensorFlow.
"""
import importlib.util
import json

import numpy as np
import torch
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession

from horovod.spark.common.backend import SparkBackend
from horovod.spark.common.store import LocalStore

SUMMARY = "estimator-predictions "


def two_blobs(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Points around (-1, -1) labelled 0 and around (1, 1) labelled 1."""
    labels = rng.integers(0, 2, count)
    points = rng.normal(0.0, 0.6, (count, 2)) + (2.0 * labels[:, None] - 1.0)
    return points, labels


def outcome(predictions, label: str, output: str) -> dict:
    """The output column's accuracy against the label (a value that is not the label's, e.g. a vector, counts as
    wrong), its type, and the raw prediction column's type and first row."""
    rows = predictions.collect()
    raw = f"{output}__rawPrediction"
    fields = {field.name: field.dataType.simpleString() for field in predictions.schema.fields}
    first = rows[0]
    return {
        "accuracy": float(np.mean([row[output] == row[label] for row in rows])),
        "type": fields[output], "label_type": fields[label],
        "python_type": type(first[output]).__name__,
        "raw_type": fields.get(raw),
        "raw_first": [float(value) for value in first[raw]] if raw in fields else None,
        "output_first": first[output] if isinstance(first[output], (int, float)) else str(first[output]),
    }


def torch_classifier(units: int) -> torch.nn.Module:
    layers = [torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, units)]
    return torch.nn.Sequential(*layers, *([torch.nn.Sigmoid()] if units == 1 else []))


def class_loss(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(outputs, labels.long())


def binary_loss(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.binary_cross_entropy(outputs.reshape(-1), labels.float().reshape(-1))


def torch_case(frame, held_out, store_dir: str, units: int, loss) -> dict:
    import horovod.spark.torch as hvd_spark

    torch.manual_seed(1)
    model = torch_classifier(units)
    estimator = hvd_spark.TorchEstimator(
        backend=SparkBackend(num_proc=2, use_gloo=True), store=LocalStore(store_dir), model=model,
        optimizer=torch.optim.Adam(model.parameters(), lr=0.02), loss=loss, input_shapes=[[-1, 2]],
        feature_cols=["features"], label_cols=["label"], validation=0.1, batch_size=64, epochs=3, random_seed=1,
        partitions_per_process=1, verbose=0)
    fitted = estimator.fit(frame)
    result = outcome(fitted.transform(held_out), "label", "label__output")
    if units == 1:
        # The one unit's value as the model gives it, for the first held-out row.
        first = held_out.first()["features"].toArray()
        with torch.no_grad():
            result["model_first"] = float(fitted.getModel()(torch.tensor([first]).float()).item())
    return result


def keras_case(frame, held_out, store_dir: str) -> dict:
    import tensorflow as tf

    import horovod.spark.keras as hvd_spark

    tf.keras.utils.set_random_seed(1)
    model = tf.keras.Sequential([tf.keras.layers.Input(shape=(2,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(2, activation="softmax")])
    estimator = hvd_spark.KerasEstimator(
        backend=SparkBackend(num_proc=2, use_gloo=True), store=LocalStore(store_dir), model=model,
        optimizer=tf.keras.optimizers.Adam(learning_rate=0.01), loss="sparse_categorical_crossentropy",
        feature_cols=["features"], label_cols=["label"], validation=0.1, batch_size=64, epochs=3, random_seed=1,
        partitions_per_process=2, verbose=0)
    return outcome(estimator.fit(frame).transform(held_out), "label", "label__output")


def main() -> None:
    rng = np.random.default_rng(0)
    points, labels = two_blobs(rng, 2000)
    held_out_points, held_out_labels = two_blobs(rng, 300)
    spark = SparkSession.builder.master("local[2]").appName("estimator-predictions").getOrCreate()

    def frame(points, labels, kind):
        return spark.createDataFrame([(Vectors.dense(point), kind(label)) for point, label in zip(points, labels)],
                                     ["features", "label"])

    results = {}
    # A double label, as Spark ML's StringIndexer gives it; a long label for Torch's class indices.
    if importlib.util.find_spec("tensorflow"):
        results["keras"] = keras_case(frame(points, labels, float), frame(held_out_points, held_out_labels, float),
                                      "/tmp/estimator-predictions-keras")
    results["torch"] = torch_case(frame(points, labels, int), frame(held_out_points, held_out_labels, int),
                                  "/tmp/estimator-predictions-torch", 2, class_loss)
    results["torch_one_unit"] = torch_case(frame(points, labels, float),
                                           frame(held_out_points, held_out_labels, float),
                                           "/tmp/estimator-predictions-torch-one-unit", 1, binary_loss)
    print(SUMMARY + json.dumps(results), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
