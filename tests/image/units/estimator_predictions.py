"""What horovod.spark's KerasModel and TorchModel write for a scalar label column
(horovod-0.28.1-estimator-predictions.patch): with a multi-unit output, the output column keeps the whole output
vector, which users' argmax UDFs read (Synapse's TorchEstimator tutorial, Horovod's Spark MNIST examples), and the
added `<output col>__prediction` column holds the predicted class as a double, as Spark ML's `prediction` does; with a
one-unit output, the output column holds that unit's value and nothing is added.

Each estimator fits two separable blobs on 2 Horovod processes and transforms held-out points. Prints one JSON line:
for each case, the accuracy read both ways (the tutorial's argmax UDF over the output column, and Spark ML's
evaluator over the prediction column), and the columns' types. TensorFlow's case is left out where the image has no
TensorFlow.
"""
import importlib.util
import json

import numpy as np
import pyspark.sql.types as T
import torch
from pyspark.ml.evaluation import MulticlassClassificationEvaluator
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf

from horovod.spark.common.backend import SparkBackend
from horovod.spark.common.store import LocalStore

SUMMARY = "estimator-predictions "


def two_blobs(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Points around (-1, -1) labelled 0 and around (1, 1) labelled 1."""
    labels = rng.integers(0, 2, count)
    points = rng.normal(0.0, 0.6, (count, 2)) + (2.0 * labels[:, None] - 1.0)
    return points, labels


def tutorial_accuracy(pred_df, output: str) -> float:
    """The evaluation of Synapse's TorchEstimator tutorial, as its users wrote it, over the output column."""
    argmax = udf(lambda v: float(np.argmax(v)), returnType=T.DoubleType())
    pred_df = pred_df.withColumn('label_pred', argmax(pred_df[output]))
    evaluator = MulticlassClassificationEvaluator(predictionCol='label_pred', labelCol='label', metricName='accuracy')
    return evaluator.evaluate(pred_df)


def outcome(predictions, label: str, output: str) -> dict:
    """The columns' types and first values, and the accuracy read both ways where the output is a vector: the
    tutorial's argmax UDF over the output column, and Spark ML's evaluator over the prediction column."""
    prediction = f"{output}__prediction"
    fields = {field.name: field.dataType.simpleString() for field in predictions.schema.fields}
    first = predictions.first()
    result = {
        "type": fields[output], "label_type": fields[label],
        "prediction_type": fields.get(prediction),
        "output_first": ([float(value) for value in first[output]] if fields[output] == "vector"
                         else first[output]),
    }
    if fields[output] == "vector":
        result["udf_accuracy"] = tutorial_accuracy(predictions, output)
    if prediction in fields:
        result["prediction_first"] = first[prediction]
        result["prediction_python_type"] = type(first[prediction]).__name__
        result["prediction_accuracy"] = MulticlassClassificationEvaluator(
            predictionCol=prediction, labelCol=label, metricName="accuracy").evaluate(predictions)
    return result


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
