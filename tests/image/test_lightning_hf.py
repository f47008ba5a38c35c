"""PyTorch Lightning, the Hugging Face Trainer and accelerate in the image beyond what the workflow rows
(test_workflows.py) show: a LightningModule trains in a `%%trainrun` cell, and a trainer set up for another number of
processes than the ranks started ends the job with one line naming both numbers, before training
(images/site-packages/trainstack_framework_ranks.py), under trainrun, TorchDistributor, a cell and accelerate launch."""
import ast
import json

import pytest

from trainrun.image_contract import EXAMPLES_DIR
from trainstack.image.workflows import untagged_lines

pytestmark = pytest.mark.timeout(900)

LIGHTNING_4_OF_2 = ("trainstack: Trainer(devices=4, num_nodes=1) = 4 processes: not the 2 ranks started (WORLD_SIZE=2) "
                    "(valid: devices x num_nodes = 2, e.g. devices=2, num_nodes=1)")
ALONE = "trainstack: {} trains on 1 process: not the 2 ranks started (WORLD_SIZE=2); without GPUs, and without {}, each " \
        "rank would train alone (valid: {} on CPUs)"
TRAINING_ARGUMENTS_ALONE = ALONE.format("TrainingArguments", *["TrainingArguments(use_cpu=True)"] * 2)
ACCELERATOR_ALONE = ALONE.format("Accelerator", *["Accelerator(cpu=True)"] * 2)


def refused_by_the_ranks_that_got_there(lines: list[str], line: str) -> bool:
    """Whichever rank reaches the check first exits, and torchrun then stops the others (its agent's documented
    behavior): a rank still importing under load is stopped before it prints its own."""
    return 1 <= lines.count(line) <= 2


def test_a_lightning_module_trains_in_a_trainrun_cell_and_4_devices_of_2_ranks_get_one_line(in_image):
    """Databricks' notebooks' `import pytorch_lightning as pl`, Trainer(strategy="ddp", devices=2) in a
    `%%trainrun torch --nproc-per-node 2` cell; then the same cell with devices=4."""
    output = in_image.run(["python", "/units/lightning_cell.py"], timeout=800)
    _, trained, refused = json.loads(output.strip().splitlines()[-1])
    assert "[default0]:rank 0 of 2: epoch 2 loss" in trained and "[default1]:rank 1 of 2: epoch 2 loss" in trained
    result = ast.literal_eval(trained[trained.index("{'ranks'"):])  # the cell's value: rank 0's dict, as shown
    assert result["ranks"] == 2 and result["losses"][-1] < result["losses"][0] / 2, result
    assert result["accuracy"] >= 0.9, result
    assert refused_by_the_ranks_that_got_there(untagged_lines(refused), LIGHTNING_4_OF_2), refused
    # trainrun's one line for the failed job, whichever error class the cell shows it with.
    assert "exited with code 1; job stopped" in refused and "Traceback" not in refused, refused
    assert "epoch" not in refused, refused


@pytest.mark.parametrize(("command", "line"), [
    (["trainrun", "torch", "--nproc-per-node", "2", f"{EXAMPLES_DIR}/lightning_mnist.py", "--devices", "4"],
     LIGHTNING_4_OF_2),
    (["trainrun", "torch", "--nproc-per-node", "2", "/units/framework_ranks.py", "training-arguments"],
     TRAINING_ARGUMENTS_ALONE),
    (["trainrun", "torch", "--nproc-per-node", "2", "/units/framework_ranks.py", "accelerator"], ACCELERATOR_ALONE),
    pytest.param(["python", "/units/framework_ranks.py", "--distributor", "lightning"], LIGHTNING_4_OF_2,
                 marks=pytest.mark.long),
    pytest.param(["python", "/units/framework_ranks.py", "--distributor", "training-arguments"],
                 TRAINING_ARGUMENTS_ALONE, marks=pytest.mark.long),
], ids=["lightning-trainrun", "training-arguments-trainrun", "accelerator-trainrun", "lightning-distributor",
        "training-arguments-distributor"])
def test_a_trainer_for_other_processes_than_the_ranks_started_ends_each_rank_with_one_line(in_image, command, line):
    output = in_image.run(command, expect=1, timeout=600)
    lines = untagged_lines(output)
    assert not any(word in output for word in ("epoch", "trained")), output[-3000:]  # nothing trained
    if command[0] == "trainrun":  # one line from each rank, and no traceback
        assert refused_by_the_ranks_that_got_there(lines, line) and "Traceback" not in output, output[-3000:]
        assert lines[-1].startswith("trainrun: rank"), output[-3000:]
    else:  # TorchDistributor's error on the driver (its traceback) repeats the ranks' last lines
        assert lines.count(line) == 4 and "RuntimeError" in output, output[-3000:]


def test_accelerate_launch_of_2_processes_it_would_start_once_says_so(in_image):
    """Without GPUs, `accelerate launch --num_processes 2` runs the script once (accelerate starts several CPU
    processes only through mpirun); it ends before the script starts."""
    output = in_image.run(["accelerate", "launch", "--num_processes", "2", f"{EXAMPLES_DIR}/accelerate_causal_lm.py"],
                          expect=1)
    assert output.strip().splitlines()[-1] == (
        "trainstack: accelerate launch --num_processes = 2: starts 1 process here (without GPUs accelerate starts "
        "several only through mpirun) (valid: --cpu --num_processes 2 --mpirun_hostfile FILE, FILE holding "
        "`localhost slots=2`; or --multi_gpu on a host with the GPUs)"), output
    assert "epoch" not in output
