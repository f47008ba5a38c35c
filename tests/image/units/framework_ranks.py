"""Trainers set up for another number of processes than the ranks started, as users write them: Lightning's
`Trainer(devices=4, strategy="ddp")`, and Hugging Face's TrainingArguments and accelerate's Accelerator written for a
machine with GPUs (no use_cpu=True / cpu=True). The image's site hook (images/site-packages/
trainstack_framework_ranks.py) ends each rank with one line before training.

    python framework_ranks.py lightning | training-arguments | accelerator        # as a rank (trainrun torch)
    python framework_ranks.py --distributor lightning | training-arguments        # TorchDistributor(local_mode=True)

A rank that gets through prints `trained alone` or `trained` and the world it saw.
"""
import sys


def lightning() -> None:
    import lightning as L
    import torch

    class Regression(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            features, targets = batch
            return torch.nn.functional.mse_loss(self.layer(features), targets)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    trainer = L.Trainer(accelerator="cpu", devices=4, strategy="ddp", max_epochs=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(Regression(), torch.utils.data.DataLoader(data, batch_size=8))
    print(f"trained on {trainer.world_size} processes", flush=True)


def training_arguments() -> None:
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir="/tmp/hf-out", report_to="none")
    print(f"trained alone: world_size {args.world_size}", flush=True)


def accelerator() -> None:
    from accelerate import Accelerator

    print(f"trained alone: num_processes {Accelerator().num_processes}", flush=True)


CASES = {"lightning": lightning, "training-arguments": training_arguments, "accelerator": accelerator}


def main(args: list[str]) -> None:
    if args[0] != "--distributor":
        CASES[args[0]]()
        return
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").getOrCreate()
    try:
        TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(CASES[args[1]])
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
