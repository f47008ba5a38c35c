"""Workflows users bring from Databricks, Synapse, TorchDistributor and Horovod images train in the image; those
that track with MLflow leave one run in the work folder's store, which MLflow's client reads back."""
import json

import pytest
from notebook_checks import no_traceback
from workflow_checks import checkpoint_writers

from trainrun.image_contract import MLFLOW_STORE, NOTEBOOK_DIR
from trainstack.image.workflows import WORKFLOWS, summary


# The horovod.spark estimators' workflows (about 2.5 minutes together) run under `invoke test --long`; in CI,
# test_estimator_predictions fits and transforms both estimators.
# So do the Keras twins of Horovod rows that CI keeps (Keras 2 through tf_keras; plain mpirun, as trainrun's Keras row
# trains it), to keep a fresh machine's CI under the hour.
# Lightning and the Hugging Face Trainer keep in CI one row each under trainrun torch (Lightning's DDP, the Trainer;
# test_lightning_hf adds a LightningModule in a %%trainrun cell): their rows under TorchDistributor, with DeepSpeed,
# accelerate launch, PEFT, MLflow's autologging (Lightning's and the Trainer's) and the distributors' rank-0 logging
# run under --long, to keep a fresh machine's CI under the hour; in CI, test_mlflow_tracking logs HorovodRunner's
# rank 0 through MLflow's server and reads the run back in its UI. So does DeepspeedTorchDistributor on
# a local-cluster master (its script row stays in CI), and the Ray Train rows under trainrun ray, on Ray on Spark and on
# one host (Ray on Spark's own row stays in CI; trainrun ray runs a driver on one host in the integration tier, and
# Ray Train's example across two nodes in test_slurm's Ray line). The distributors' local-mode rows and DeepSpeed's own launcher
# run under --long too: in CI, test_distributors runs TorchDistributor(local_mode=True) and DeepspeedTorchDistributor,
# and test_deepspeed_launch the `deepspeed` launcher on one node and across two containers. TorchDistributor's function
# row on local[2] is --long too: its script row stays, and test_distributors returns rank 0's value from a function on
# barrier tasks.
LONG_WORKFLOWS = ("horovod-spark-estimator", "horovod-spark-keras-estimator", "horovod-spark-keras-estimator-legacy",
                  "horovod-keras-legacy", "horovod-keras-mpirun", "lightning-distributor-local",
                  "lightning-distributor-local-cluster", "hf-trainer-distributor", "hf-trainer-deepspeed-trainrun",
                  "hf-trainer-deepspeed-distributor", "accelerate-launch", "peft-lora", "mlflow-transformers-autolog",
                  "torch-distributor-mlflow", "horovod-runner-mlflow", "deepspeed-distributor-local-cluster",
                  "torch-distributor-local", "deepspeed-distributor-local", "deepspeed-zero3-launcher",
                  "ray-train-on-spark-trainrun", "ray-train-trainrun", "torch-distributor", "mlflow-lightning-autolog")

# spark.executor.memory's default, which the Ray on Spark row leaves (its local-cluster workers offer 2 cores each).
EXECUTOR_MEMORY = 1024 ** 3


@pytest.mark.parametrize("workflow", [
    pytest.param(w, id=w.name, marks=[pytest.mark.long] if w.name in LONG_WORKFLOWS else []) for w in WORKFLOWS])
def test_workflow_learns_with_every_rank(in_image, workflow, tmp_path):
    tmp_path.chmod(0o777)  # the work folder of the MLflow rows, where the image's user writes the store
    work = {str(tmp_path): {"bind": NOTEBOOK_DIR, "mode": "rw"}} if workflow.experiment else None
    # As the pages run the MLflow rows: started as root with the folder mounted, the image's user becomes its owner.
    output = in_image.run(workflow.command, timeout=600, volumes=work, user="root" if workflow.experiment else None)
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
    if "ray_worker_nodes" in result:  # Ray on Spark: one worker node per executor, sized as that executor
        assert [node["cpus"] for node in result["ray_worker_nodes"]] == [2, 2], result
        assert all(node["memory"] + node["object_store_memory"] <= EXECUTOR_MEMORY
                   for node in result["ray_worker_nodes"]), result
    if workflow.name.startswith("horovod-spark"):  # the estimators: no PySpark daemon traceback (see notebook_checks)
        assert no_traceback(output) == [], output[-3000:]
    if workflow.writes_checkpoint:
        assert checkpoint_writers(output) == ["rank 0"], output[-3000:]
    if "zero_stage" in result:  # DeepSpeed: every rank saved its ZeRO shard, and the checkpoint loaded back
        assert [shard.split("_")[3] for shard in result["zero_shards"] if "optim_states" in shard] == ["0", "1"], result
        assert result["checkpoint_loaded_back"], result
    if workflow.experiment:
        check_the_logged_run(in_image, workflow, result, work)


def check_the_logged_run(in_image, workflow, result: dict, work: dict) -> None:
    """Rank 0 alone logged: one finished run, the one the workflow printed, with its parameters and the loss of
    every epoch, step by step, as the summary has them."""
    logged = json.loads(in_image.run(["python", "/units/mlflow_runs.py", MLFLOW_STORE, workflow.experiment],
                                     volumes=work).strip().splitlines()[-1])
    assert logged["runs"] is not None and len(logged["runs"]) == 1, logged
    (run,) = logged["runs"]
    assert run["run_id"] == result["run_id"] and run["status"] == "FINISHED", (run, result)
    # Its artifacts (autolog's model, checkpoints) beside the store, in the mounted folder.
    assert run["artifact_uri"].removeprefix("file://").startswith(f"{NOTEBOOK_DIR}/mlartifacts/"), run
    assert run["params"], run
    history = run["metrics"][workflow.loss_metric]
    assert [step for step, _ in history] == sorted(step for step, _ in history), history
    assert [value for _, value in history] == pytest.approx(result["losses"]), (history, result["losses"])
