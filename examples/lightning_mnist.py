"""PyTorch Lightning's `Trainer(strategy="ddp")` as users launch it with torchrun (`trainrun torch --nproc-per-node 2
lightning_mnist.py`); examples/lightning_distributor_mnist.py runs the same `train` under TorchDistributor.

    trainrun torch --nproc-per-node 2 lightning_mnist.py [--devices 2] [--num-nodes 1] [--epochs E] [--lr LR]

Under torchrun, Lightning takes the ranks from torchrun's environment: `devices` (processes per node) times
`num_nodes` must be the number of ranks started. Lightning gives each rank its share of the data (a
DistributedSampler of its own) and averages the logged loss over the ranks (sync_dist). Rank 0 alone writes the
checkpoints and prints a JSON summary line.

Lightning's own ModelCheckpoint saves at each epoch's end into --checkpoint-dir (a folder every rank shares), and
`fit(ckpt_path="last")` resumes from its `last.ckpt` when one is there: a run stopped, killed or requeued starts
again at the last finished epoch (end-of-epoch checkpoints: a fit resumed mid-epoch would see that epoch's first
batches again). Lightning writes each checkpoint under another name and renames it, so a kill during a save leaves
the previous one.
"""
import json
import os

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from digit_net import DigitNet
from synthetic_digits import make_digits, training_arguments


class DigitClassifier(L.LightningModule):
    def __init__(self, lr: float):
        super().__init__()
        self.save_hyperparameters()
        self.net = DigitNet()

    def forward(self, images):
        return self.net(images)

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = F.cross_entropy(self(images), labels)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def on_train_epoch_end(self):
        if self.trainer.is_global_zero:
            print(f"epoch {self.current_epoch} loss {self.trainer.callback_metrics['train_loss']:.4f}", flush=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class EpochLosses(L.Callback):
    """Each epoch's loss, averaged over its steps and the ranks; kept in the checkpoints, so a resumed run's summary
    holds the epochs before the stop too."""

    def __init__(self):
        self.losses = []

    def on_train_epoch_end(self, trainer, pl_module):
        self.losses.append(trainer.callback_metrics["train_loss"].item())

    def state_dict(self):
        return {"losses": self.losses}

    def load_state_dict(self, state_dict):
        self.losses = state_dict["losses"]


class ResumedLine(L.Callback):
    """The line every resuming example prints (trainrun.checkpoint's message), from where Lightning restored."""

    def on_train_start(self, trainer, pl_module):
        if trainer.ckpt_path and trainer.is_global_zero:
            print(f"resumed from step {trainer.global_step} ({trainer.ckpt_path})", flush=True)


def train(lr: float, epochs: int, batch_size: int, train_size: int, checkpoint_dir: str, devices: int = 2,
          num_nodes: int = 1) -> dict:
    """Fits on every rank; returns the summary (rank 0's is the one printed)."""
    torch.manual_seed(42)
    torch.set_num_threads(1)
    images, labels = make_digits(train_size, seed=0)
    loader = DataLoader(TensorDataset(torch.from_numpy(images), torch.from_numpy(labels)), batch_size=batch_size,
                        shuffle=True)
    model = DigitClassifier(lr)
    epoch_losses = EpochLosses()
    each_epoch = ModelCheckpoint(dirpath=checkpoint_dir, every_n_epochs=1, save_last=True)
    trainer = L.Trainer(accelerator="auto", devices=devices, num_nodes=num_nodes, strategy="ddp", max_epochs=epochs,
                        callbacks=[epoch_losses, each_epoch, ResumedLine()], logger=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, loader, ckpt_path="last")

    test_images, test_labels = make_digits(1000, seed=1)
    model.eval()
    with torch.no_grad():
        predictions = model(torch.from_numpy(test_images).to(model.device)).argmax(dim=1).cpu()
    accuracy = (predictions == torch.from_numpy(test_labels)).float().mean().item()
    checkpoint = os.path.join(checkpoint_dir, "model.ckpt")
    trainer.save_checkpoint(checkpoint)  # every rank calls it; rank 0 writes
    if trainer.is_global_zero:
        print(f"rank {trainer.global_rank} wrote {checkpoint}", flush=True)
    return {"workflow": "lightning-ddp", "rank": trainer.global_rank, "ranks": trainer.world_size,
            "losses": epoch_losses.losses, "accuracy": accuracy}


def main():
    parser = training_arguments(default_lr=0.04)
    parser.add_argument("--devices", type=int, default=2, help="processes per node: torchrun's --nproc-per-node")
    parser.add_argument("--num-nodes", type=int, default=1)
    args = parser.parse_args()
    summary = train(args.lr, args.epochs, args.batch_size, args.train_size, args.checkpoint_dir, args.devices,
                    args.num_nodes)
    if summary["rank"] == 0:
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
