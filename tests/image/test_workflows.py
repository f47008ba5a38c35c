"""Workflows users bring from Databricks, Synapse, TorchDistributor and Horovod images train in the image."""
import pytest
from workflow_checks import checkpoint_writers

from trainstack.image.workflows import WORKFLOWS, summary


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=[w.name for w in WORKFLOWS])
def test_workflow_learns_with_every_rank(in_image, workflow):
    output = in_image.run(workflow.command, timeout=600)
    result = summary(output)
    assert result["ranks"] == 2, output[-3000:]
    assert result["losses"][-1] < result["losses"][0] / 2, result
    assert result["accuracy"] >= workflow.min_accuracy, result
    assert result.get("same_weights_on_every_rank", True), result
    if workflow.writes_checkpoint:
        assert checkpoint_writers(output) == ["rank 0"], output[-3000:]
    if "zero_stage" in result:  # DeepSpeed: every rank saved its ZeRO shard, and the checkpoint loaded back
        assert [shard.split("_")[3] for shard in result["zero_shards"] if "optim_states" in shard] == ["0", "1"], result
        assert result["checkpoint_loaded_back"], result
