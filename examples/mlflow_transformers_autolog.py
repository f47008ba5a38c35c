"""MLflow's autologging of a Hugging Face Trainer, `mlflow.transformers.autolog()` before `trainer.train()`, on 2
ranks under torchrun:

    trainrun torch --nproc-per-node 2 mlflow_transformers_autolog.py [--tracking-uri URI] [--experiment NAME]

A small ResNet image classifier built from its config (nothing is downloaded) learns the synthetic digits, from a
`datasets.Dataset`. The tracking URI is MLFLOW_TRACKING_URI's, else a SQLite file in the image's work folder; the
experiment reaches the Trainer's MLflow callback as MLFLOW_EXPERIMENT_NAME, as transformers documents it. The
callback logs from the main process alone (rank 0): one run, with the TrainingArguments and the model's config as
parameters and each epoch's `loss`. Rank 0 prints the JSON summary line.
"""
import json
import os

import mlflow
import torch
import torch.distributed as dist
from datasets import Dataset
from transformers import ResNetConfig, ResNetForImageClassification, Trainer, TrainingArguments

from synthetic_digits import NUM_CLASSES, make_digits, training_arguments


def digits_dataset(count: int, seed: int) -> Dataset:
    images, labels = make_digits(count, seed)
    return Dataset.from_dict({"pixel_values": images, "labels": labels}).with_format("torch")


def main():
    parser = training_arguments(default_lr=0.003)
    parser.add_argument("--tracking-uri",
                        default=os.environ.get("MLFLOW_TRACKING_URI", "sqlite:////home/trainer/work/mlflow.db"))
    parser.add_argument("--experiment", default="transformers-autolog")
    args = parser.parse_args()

    os.environ["MLFLOW_EXPERIMENT_NAME"] = args.experiment
    mlflow.set_tracking_uri(args.tracking_uri)
    mlflow.transformers.autolog()

    torch.set_num_threads(1)
    config = ResNetConfig(num_channels=1, embedding_size=8, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic",
                          num_labels=NUM_CLASSES)
    training_args = TrainingArguments(output_dir=args.checkpoint_dir, num_train_epochs=args.epochs,
                                      learning_rate=args.lr, per_device_train_batch_size=args.batch_size,
                                      per_device_eval_batch_size=250, logging_strategy="epoch", save_strategy="no",
                                      use_cpu=True, seed=42, disable_tqdm=True, ddp_find_unused_parameters=False,
                                      # ResNet's loss is its batch's mean: no token count to average across ranks.
                                      average_tokens_across_devices=False)
    trainer = Trainer(model=ResNetForImageClassification(config), args=training_args,
                      train_dataset=digits_dataset(args.train_size, seed=0))
    trainer.train()

    predictions = trainer.predict(digits_dataset(1000, seed=1))
    accuracy = float((predictions.predictions.argmax(axis=1) == predictions.label_ids).mean())
    ranks = torch.ones(1)
    dist.all_reduce(ranks)
    if trainer.is_world_process_zero():
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        for epoch, loss in enumerate(losses):
            print(f"epoch {epoch} loss {loss:.4f}", flush=True)
        run = mlflow.last_active_run()
        print(json.dumps({"workflow": "mlflow-transformers-autolog", "ranks": int(ranks.item()), "losses": losses,
                          "accuracy": accuracy, "run_id": run.info.run_id}), flush=True)


if __name__ == "__main__":
    main()
