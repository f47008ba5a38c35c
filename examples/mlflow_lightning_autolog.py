"""MLflow's autologging of a Lightning Trainer as MLflow's guide writes it, `mlflow.pytorch.autolog()` and
`trainer.fit` in `mlflow.start_run()`, on 2 DDP ranks under torchrun:

    trainrun torch --nproc-per-node 2 mlflow_lightning_autolog.py [--tracking-uri URI] [--experiment NAME]

The tracking URI is MLFLOW_TRACKING_URI's, else a SQLite file in the image's work folder. Every rank runs the
script, so rank 0 alone turns autologging on and opens the run: one run, with the optimizer's parameters, each
epoch's `train_loss`, `val_loss` and `val_accuracy`, the best checkpoint and the model. Rank 0 prints the JSON
summary line.
"""
import json
import os

import lightning as L
import mlflow
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from digit_net import DigitNet
from synthetic_digits import make_digits, training_arguments


class DigitClassifier(L.LightningModule):
    def __init__(self, lr: float):
        super().__init__()
        self.save_hyperparameters()
        self.net = DigitNet()
        self.epoch_losses: list[float] = []

    def forward(self, images):
        return self.net(images)

    def training_step(self, batch, batch_index):
        images, labels = batch
        loss = F.cross_entropy(self(images), labels)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_index):
        images, labels = batch
        logits = self(images)
        self.log("val_loss", F.cross_entropy(logits, labels), sync_dist=True)
        self.log("val_accuracy", (logits.argmax(dim=1) == labels).float().mean(), sync_dist=True)

    def on_train_epoch_end(self):
        self.epoch_losses.append(self.trainer.callback_metrics["train_loss"].item())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def digits_loader(count: int, seed: int, batch_size: int) -> DataLoader:
    images, labels = make_digits(count, seed)
    return DataLoader(TensorDataset(torch.from_numpy(images), torch.from_numpy(labels)), batch_size=batch_size)


def main():
    parser = training_arguments(default_lr=0.04)
    parser.add_argument("--devices", type=int, default=2, help="ranks per node: torchrun's --nproc-per-node")
    parser.add_argument("--tracking-uri",
                        default=os.environ.get("MLFLOW_TRACKING_URI", "sqlite:////home/trainer/work/mlflow.db"))
    parser.add_argument("--experiment", default="lightning-autolog")
    args = parser.parse_args()

    torch.manual_seed(42)
    torch.set_num_threads(1)
    model = DigitClassifier(args.lr)
    trainer = L.Trainer(accelerator="cpu", devices=args.devices, strategy="ddp", max_epochs=args.epochs,
                        default_root_dir=args.checkpoint_dir, log_every_n_steps=10, enable_progress_bar=False)
    train_loader = digits_loader(args.train_size, 0, args.batch_size)
    val_loader = digits_loader(1000, 1, args.batch_size)
    if trainer.global_rank == 0:
        mlflow.set_tracking_uri(args.tracking_uri)
        mlflow.set_experiment(args.experiment)
        mlflow.pytorch.autolog()
        with mlflow.start_run() as run:
            trainer.fit(model, train_loader, val_loader)
    else:
        trainer.fit(model, train_loader, val_loader)

    ranks = torch.ones(1)
    dist.all_reduce(ranks)
    if trainer.global_rank == 0:
        for epoch, loss in enumerate(model.epoch_losses):
            print(f"epoch {epoch} loss {loss:.4f}", flush=True)
        print(json.dumps({"workflow": "mlflow-lightning-autolog", "ranks": int(ranks.item()),
                          "losses": model.epoch_losses, "accuracy": trainer.callback_metrics["val_accuracy"].item(),
                          "run_id": run.info.run_id}), flush=True)


if __name__ == "__main__":
    main()
