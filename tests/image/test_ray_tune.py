"""Ray Tune in the image: the four trials of examples/ray_tune_mnist.py (one learning rate each, one CPU each) on the
Ray cluster `trainrun ray` starts in the container; each ends without an error and the best one learns."""
import pytest

from trainrun.image_contract import EXAMPLES_DIR
from trainstack.image.workflows import summary

pytestmark = [pytest.mark.long, pytest.mark.timeout(600)]


def test_four_tune_trials_run_and_the_best_learns(in_image):
    output = in_image.run(["trainrun", "ray", "python", f"{EXAMPLES_DIR}/ray_tune_mnist.py"], timeout=500)
    result = summary(output)
    assert sorted(trial["lr"] for trial in result["trials"]) == [0.002, 0.01, 0.04, 0.1], result
    assert [trial["error"] for trial in result["trials"]] == [""] * 4, result
    assert all(trial["accuracy"] is not None for trial in result["trials"]), result
    assert result["best"]["accuracy"] == max(trial["accuracy"] for trial in result["trials"]) >= 0.9, result
