"""horovod.spark's KerasModel and TorchModel `transform` on a scalar label column
(images/patches/horovod-0.28.1-estimator-predictions.patch). A classifier's output column holds its output vector,
as upstream's TorchModel writes it, so the argmax UDF of Synapse's TorchEstimator tutorial, unchanged, reads the class;
the added `<output col>__prediction` holds that class as a double, as Spark ML's `prediction` does, for its evaluators
(MulticlassClassificationEvaluator refuses any other type, a long label's too).
Unpatched, Keras wrote the probability of class 0 (accuracy 0.0 against labels of 1.0). The patch's first version
wrote the class into the output column for Torch too, and the tutorial's argmax of that scalar gave class 0 for
every row (12% accuracy on MNIST, with no error)."""
import json

import pytest
from notebook_checks import no_traceback

SUMMARY = "estimator-predictions "


@pytest.fixture(scope="module")
def estimator_output(in_image) -> str:
    return in_image.run(["python", "/units/estimator_predictions.py"], timeout=1200)


@pytest.fixture(scope="module")
def predictions(estimator_output) -> dict:
    lines = [line for line in estimator_output.splitlines() if line.startswith(SUMMARY)]
    assert lines, estimator_output[-3000:]
    return json.loads(lines[-1][len(SUMMARY):])


def test_fitting_and_transforming_shows_no_traceback(predictions, estimator_output):
    """A successful fit and transform prints no traceback (the case that printed PySpark's BrokenPipeError is
    test_frameworks' closed reader, and the estimator workflows under --long)."""
    assert no_traceback(estimator_output) == []


CLASSIFIERS = ["keras", "torch"]


@pytest.fixture(params=CLASSIFIERS)
def classifier(request, predictions, image_flavor) -> dict:
    if request.param == "keras" and "tensorflow" not in image_flavor.components:
        pytest.skip(f"{image_flavor.name} has no TensorFlow")
    return predictions[request.param]


def test_the_tutorials_argmax_udf_over_the_output_column_reaches_the_accuracy(classifier):
    assert classifier["type"] == "vector" and len(classifier["output_first"]) == 2, classifier
    assert classifier["udf_accuracy"] >= 0.9, classifier


def test_the_prediction_column_holds_the_class_as_spark_mls_prediction_does(classifier):
    assert classifier["prediction_accuracy"] >= 0.9, classifier
    assert classifier["prediction_type"] == "double" and classifier["prediction_python_type"] == "float", classifier
    scores = classifier["output_first"]
    assert classifier["prediction_first"] == max(range(2), key=scores.__getitem__), classifier


def test_a_long_label_keeps_its_type_and_a_softmax_gives_its_probabilities(predictions):
    assert predictions["torch"]["label_type"] == "bigint", predictions["torch"]
    if "keras" in predictions:
        keras = predictions["keras"]
        assert keras["label_type"] == "double" and abs(sum(keras["output_first"]) - 1.0) < 1e-4, keras


def test_a_one_unit_output_keeps_its_value_and_adds_no_column(predictions):
    one_unit = predictions["torch_one_unit"]
    assert one_unit["prediction_type"] is None, one_unit
    assert one_unit["type"] == "double" and 0.0 < one_unit["output_first"] < 1.0, one_unit
    assert one_unit["output_first"] == pytest.approx(one_unit["model_first"], abs=1e-6), one_unit
