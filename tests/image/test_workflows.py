"""Workflows users bring from Databricks, Synapse, TorchDistributor and Horovod images train in the image."""
import warnings

import pytest

from trainstack.workflows import WORKFLOWS, checkpoint_writers, summary

# PyTorch's Gloo backend now and then aborts one rank as the process exits, after the job has finished and
# printed its summary: DDP keeps the process group, and its Gloo threads and sockets, alive past
# destroy_process_group (upstream; measured: 10 references to the group stay after `del model`), and a peer
# closing its sockets during that exit ends in std::terminate. Seen about once in 60 runs; not reproducible
# on demand. Such a run is repeated once, with a warning in the report; any other failure fails at once.
GLOO_EXIT_ABORT = "terminate called without an active exception"


def aborted_after_finishing(status: int, output: str) -> bool:
    try:
        summary(output)
    except ValueError:
        return False
    return status != 0 and GLOO_EXIT_ABORT in output


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=[w.name for w in WORKFLOWS])
def test_workflow_learns_with_every_rank(in_image, workflow):
    status, output = in_image.run_status(workflow.command, timeout=600)
    if aborted_after_finishing(status, output):
        warnings.warn(f"{workflow.name}: a rank aborted at exit in Gloo's teardown after finishing; run again")
        status, output = in_image.run_status(workflow.command, timeout=600)
    assert status == 0, f"exit {status}; output:\n{output[-4000:]}"
    result = summary(output)
    assert result["ranks"] == 2, output[-3000:]
    assert result["losses"][-1] < result["losses"][0] / 2, result
    assert result["accuracy"] >= workflow.min_accuracy, result
    assert result.get("same_weights_on_every_rank", True), result
    if workflow.writes_checkpoint:
        assert checkpoint_writers(output) == ["rank 0"], output[-3000:]
