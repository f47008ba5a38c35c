"""horovod.spark's KerasModel and TorchModel `transform` on a scalar label column
(images/patches/horovod-0.28.1-estimator-predictions.patch): a classifier's output column holds the predicted class
in the label's type, so Spark ML's evaluators can read it, and its scores go to `<output col>__rawPrediction`.
Unpatched, Keras wrote the probability of class 0 (accuracy 0.0 against labels of 1.0) and Torch a vector."""
import json

import pytest

SUMMARY = "estimator-predictions "


@pytest.fixture(scope="module")
def predictions(in_image) -> dict:
    output = in_image.run(["python", "/units/estimator_predictions.py"], timeout=1200)
    lines = [line for line in output.splitlines() if line.startswith(SUMMARY)]
    assert lines, output[-3000:]
    return json.loads(lines[-1][len(SUMMARY):])


def test_keras_writes_the_predicted_class_as_a_double_label(predictions, image_flavor):
    if "tensorflow" not in image_flavor.components:
        pytest.skip(f"{image_flavor.name} has no TensorFlow")
    keras = predictions["keras"]
    assert keras["accuracy"] >= 0.9, keras
    assert keras["type"] == keras["label_type"] == "double", keras


def test_torch_writes_the_predicted_class_in_the_labels_type(predictions):
    torch = predictions["torch"]
    assert torch["accuracy"] >= 0.9, torch
    assert torch["type"] == torch["label_type"] == "bigint" and torch["python_type"] == "int", torch


def test_the_class_scores_go_to_the_raw_prediction_column(predictions):
    for case in ("keras", "torch"):
        if case in predictions:
            result = predictions[case]
            assert result["raw_type"] == "vector" and len(result["raw_first"]) == 2, result
            assert result["output_first"] == max(range(2), key=result["raw_first"].__getitem__), result
    assert abs(sum(predictions.get("keras", {"raw_first": [1.0]})["raw_first"]) - 1.0) < 1e-4, predictions


def test_a_one_unit_output_keeps_its_value(predictions):
    one_unit = predictions["torch_one_unit"]
    assert one_unit["raw_type"] is None, one_unit
    assert one_unit["type"] == "double" and 0.0 < one_unit["output_first"] < 1.0, one_unit
    assert one_unit["output_first"] == pytest.approx(one_unit["model_first"], abs=1e-6), one_unit
