"""ZeRO-2 with the optimizer offloaded to the CPU (ZeRO-Offload: DeepSpeedCPUAdam) on one rank over gloo, through
deepspeed.initialize; prints a JSON line with the losses, the optimizer DeepSpeed chose and what was JIT-built."""
import json
import os

import deepspeed
import torch

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")
os.environ.setdefault("RANK", "0")
os.environ.setdefault("LOCAL_RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
deepspeed.init_distributed(dist_backend="gloo")
torch.manual_seed(0)
features = torch.randn(256, 16)
labels = (features.sum(dim=1) > 0).long()
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
config = {
    "train_batch_size": 32,
    "optimizer": {"type": "Adam", "params": {"lr": 1e-2}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
}
engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
losses = []
for epoch in range(5):
    for start in range(0, len(features), 32):
        loss = torch.nn.functional.cross_entropy(engine(features[start:start + 32]), labels[start:start + 32])
        engine.backward(loss)
        engine.step()
    losses.append(float(loss))
extensions = os.environ.get("TORCH_EXTENSIONS_DIR", "")
print(json.dumps({"losses": losses, "optimizer": type(optimizer.optimizer).__name__,
                  "jit_built": sorted(os.listdir(extensions)) if extensions and os.path.isdir(extensions) else []}))
