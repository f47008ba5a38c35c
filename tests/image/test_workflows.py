"""Workflows users bring from Databricks, Synapse, TorchDistributor and Horovod images train in the image."""
import pytest
from workflow_checks import checkpoint_writers

from trainstack.image.workflows import WORKFLOWS, summary


# The horovod.spark estimators' workflows (about 2.5 minutes together) run under `invoke test --long`; in CI,
# test_estimator_predictions fits and transforms both estimators.
# So do the Keras twins of Horovod rows that CI keeps (Keras 2 through tf_keras; plain mpirun, as trainrun's Keras row
# trains it), to keep a fresh machine's CI under the hour.
# Lightning and the Hugging Face Trainer keep in CI one row per launcher (trainrun torch, TorchDistributor in local
# mode, accelerate launch, about 4 minutes together); their rows on Spark executors (local-cluster, local[2]) run
# under --long.
LONG_WORKFLOWS = ("horovod-spark-estimator", "horovod-spark-keras-estimator", "horovod-spark-keras-estimator-legacy",
                  "horovod-keras-legacy", "horovod-keras-mpirun", "lightning-distributor-local-cluster",
                  "hf-trainer-distributor", "hf-trainer-deepspeed-distributor")


@pytest.mark.parametrize("workflow", [
    pytest.param(w, id=w.name, marks=[pytest.mark.long] if w.name in LONG_WORKFLOWS else []) for w in WORKFLOWS])
def test_workflow_learns_with_every_rank(in_image, workflow):
    output = in_image.run(workflow.command, timeout=600)
    result = summary(output)
    assert result["ranks"] == 2, output[-3000:]
    assert result["losses"][-1] < result["losses"][0] / 2, result
    assert result["accuracy"] >= workflow.min_accuracy, result
    # horovod.spark's estimators: the class read from the column the patch adds, too.
    assert result.get("prediction_accuracy", workflow.min_accuracy) >= workflow.min_accuracy, result
    assert result.get("same_weights_on_every_rank", True), result
    # PEFT: the saved adapter, loaded back onto the base model from disk, gives the trained model's logits.
    assert result.get("adapter_loaded_back", True), result
    # The Trainer's DeepSpeed rows: the engine it built runs the config's ZeRO stage (deepspeed_zero2.json).
    assert result.get("deepspeed_zero_stage", 2) == 2, result
    if workflow.writes_checkpoint:
        assert checkpoint_writers(output) == ["rank 0"], output[-3000:]
    if "zero_stage" in result:  # DeepSpeed: every rank saved its ZeRO shard, and the checkpoint loaded back
        assert [shard.split("_")[3] for shard in result["zero_shards"] if "optim_states" in shard] == ["0", "1"], result
        assert result["checkpoint_loaded_back"], result
