"""The classic Horovod + PyTorch recipe, unchanged from what users run elsewhere.

Run with `trainrun mpi -np 2 -- python horovod_torch_mnist.py` or `mpirun -np 2 python horovod_torch_mnist.py`.
Rank 0 alone writes the checkpoint and prints a JSON summary line.
"""
import json
import os

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from digit_net import DigitNet
from synthetic_digits import make_digits, training_arguments


def main():
    parser = training_arguments(default_lr=0.02)
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
        device = torch.device("cuda", hvd.local_rank())

    images, labels = make_digits(args.train_size, seed=0)
    train_set = TensorDataset(torch.from_numpy(images), torch.from_numpy(labels))
    sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank())
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

    model = DigitNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    epoch_losses = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        total = torch.zeros(1)
        for batch_images, batch_labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch_images.to(device)), batch_labels.to(device))
            loss.backward()
            optimizer.step()
            total += loss.detach().cpu()
        epoch_loss = hvd.allreduce(total / len(loader), name="epoch_loss").item()
        epoch_losses.append(epoch_loss)
        if hvd.rank() == 0:
            print(f"epoch {epoch} loss {epoch_loss:.4f}", flush=True)

    test_images, test_labels = make_digits(1000, seed=1)
    model.eval()
    with torch.no_grad():
        predictions = model(torch.from_numpy(test_images).to(device)).argmax(dim=1).cpu()
    accuracy = (predictions == torch.from_numpy(test_labels)).float().mean().item()
    ranks_seen = int(hvd.allreduce(torch.ones(1), name="ranks", op=hvd.Sum).item())

    if hvd.rank() == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        checkpoint = os.path.join(args.checkpoint_dir, "model.pt")
        torch.save(model.state_dict(), checkpoint)
        print(f"rank {hvd.rank()} wrote {checkpoint}", flush=True)
        print(json.dumps({"workflow": "horovod-torch", "ranks": ranks_seen, "losses": epoch_losses,
                          "accuracy": accuracy}), flush=True)


if __name__ == "__main__":
    main()
