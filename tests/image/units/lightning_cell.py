"""Runs, headless in the image's own kernel, a LightningModule written in a `%%trainrun torch` cell, as Databricks'
notebooks write it (`import pytorch_lightning as pl`), and the same cell asking Lightning for 4 devices; prints a
JSON list with the text each cell showed (its streams, results and errors).

The data and the model come from the image's examples folder (synthetic_digits.py, digit_net.py).
"""
import json

from notebook_cells import run_cells

HELPERS = """import os
import sys

EXAMPLES = "/opt/trainstack/examples"
sys.path.insert(0, EXAMPLES)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [EXAMPLES, os.environ.get("PYTHONPATH")]))"""

LIGHTNING_CELL = """%%trainrun torch --nproc-per-node 2
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from digit_net import DigitNet
from synthetic_digits import make_digits


class DigitClassifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = DigitNet()
        self.epoch_losses = []

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = F.cross_entropy(self.net(images), labels)
        self.log("train_loss", loss, on_epoch=True, on_step=False, sync_dist=True)
        return loss

    def on_train_epoch_end(self):
        self.epoch_losses.append(self.trainer.callback_metrics["train_loss"].item())
        print(f"rank {self.global_rank} of {self.trainer.world_size}: epoch {self.current_epoch} "
              f"loss {self.epoch_losses[-1]:.4f}", flush=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.04, momentum=0.9)


torch.manual_seed(42)
torch.set_num_threads(1)
images, labels = make_digits(3000, seed=0)
loader = DataLoader(TensorDataset(torch.from_numpy(images), torch.from_numpy(labels)), batch_size=32, shuffle=True)
model = DigitClassifier()
trainer = pl.Trainer(accelerator="cpu", devices=DEVICES, strategy="ddp", max_epochs=3, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, loader)
test_images, test_labels = make_digits(1000, seed=1)
with torch.no_grad():
    predictions = model.net(torch.from_numpy(test_images)).argmax(dim=1)
{"ranks": trainer.world_size, "losses": model.epoch_losses,
 "accuracy": (predictions == torch.from_numpy(test_labels)).float().mean().item()}"""

print(json.dumps(run_cells([HELPERS, LIGHTNING_CELL.replace("DEVICES", "2"), LIGHTNING_CELL.replace("DEVICES", "4")])))
