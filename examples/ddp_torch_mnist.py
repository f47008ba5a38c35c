"""PyTorch DDP as users launch it with torchrun / torch.distributed.launch (`trainrun torch --nproc-per-node 2`).

The device comes from LOCAL_RANK (or the legacy --local-rank argument torch.distributed.launch
passes). Rank 0 alone writes the checkpoint and prints a JSON summary line.
"""
import json
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from digit_net import DigitNet
from synthetic_digits import make_digits, training_arguments


def main():
    parser = training_arguments(default_lr=0.04)
    parser.add_argument("--local-rank", "--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", args.local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(42)
    torch.set_num_threads(1)

    images, labels = make_digits(args.train_size, seed=0)
    train_set = TensorDataset(torch.from_numpy(images), torch.from_numpy(labels))
    sampler = DistributedSampler(train_set)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    model = DistributedDataParallel(DigitNet().to(device), device_ids=[args.local_rank] if use_cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    epoch_losses = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(1, device=device)
        for batch_images, batch_labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch_images.to(device)), batch_labels.to(device))
            loss.backward()
            optimizer.step()
            total += loss.detach()
        dist.all_reduce(total)
        epoch_losses.append(total.item() / world / len(loader))
        if rank == 0:
            print(f"epoch {epoch} loss {epoch_losses[-1]:.4f}", flush=True)

    test_images, test_labels = make_digits(1000, seed=1)
    with torch.no_grad():
        predictions = model.module(torch.from_numpy(test_images).to(device)).argmax(dim=1).cpu()
    accuracy = (predictions == torch.from_numpy(test_labels)).float().mean().item()
    ranks = torch.ones(1, device=device)
    dist.all_reduce(ranks)
    if rank == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        checkpoint = os.path.join(args.checkpoint_dir, "model.pt")
        torch.save(model.module.state_dict(), checkpoint)
        print(f"rank {rank} wrote {checkpoint}", flush=True)
        print(json.dumps({"workflow": "ddp-torch", "ranks": int(ranks.item()), "losses": epoch_losses,
                          "accuracy": accuracy}), flush=True)
    # Every rank leaves together, so none tears its sockets down while a peer still uses them.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
