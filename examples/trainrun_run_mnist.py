"""`trainrun.run(train, lr, epochs, backend="torch", num_processes=2)`: a DDP function on two ranks.

    python trainrun_run_mnist.py [--lr LR] [--epochs E] [--checkpoint-dir DIR]

The TorchDistributor style without Spark: `train` holds its imports, since the function is pickled
and run by every rank under torchrun. At each epoch's end rank 0 writes a checkpoint (trainrun.checkpoint: the model,
the optimizer, the losses so far); a run started again resumes from the newest, which rank 0 reads and broadcasts, and
says so in one line. Rank 0 writes the final model; the driver prints rank 0's return value as the JSON summary line.
"""
import json
import os

import trainrun

from synthetic_digits import training_arguments

HERE = os.path.dirname(os.path.abspath(__file__))


def train(lr: float, epochs: int, batch_size: int, train_size: int, checkpoint_dir: str) -> dict:
    import os

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    from digit_net import DigitNet
    from synthetic_digits import make_digits
    from trainrun import checkpoint

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(42)
    torch.set_num_threads(1)
    images, labels = make_digits(train_size, seed=0)
    train_set = TensorDataset(torch.from_numpy(images), torch.from_numpy(labels))
    sampler = DistributedSampler(train_set)
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler)
    model = DistributedDataParallel(DigitNet())
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    # Rank 0 reads the newest checkpoint and broadcasts it: the other ranks need not see its folder.
    resumed = checkpoint.latest(checkpoint_dir) if rank == 0 else None
    saved = [torch.load(resumed.path / "state.pt") if resumed else None]
    dist.broadcast_object_list(saved, src=0)
    first_epoch, epoch_losses = 0, []
    if saved[0] is not None:
        model.module.load_state_dict(saved[0]["model"])
        optimizer.load_state_dict(saved[0]["optimizer"])
        first_epoch, epoch_losses = saved[0]["epoch"], saved[0]["epoch_losses"]
    if resumed:
        print(resumed.message(), flush=True)

    for epoch in range(first_epoch, epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(1)
        for batch_images, batch_labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch_images), batch_labels)
            loss.backward()
            optimizer.step()
            total += loss.detach()
        dist.all_reduce(total)
        epoch_losses.append(total.item() / world / len(loader))
        if rank == 0:
            print(f"epoch {epoch} loss {epoch_losses[-1]:.4f}", flush=True)
            with checkpoint.writing(checkpoint_dir, (epoch + 1) * len(loader)) as folder:
                torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                            "epoch": epoch + 1, "epoch_losses": epoch_losses}, folder / "state.pt")

    test_images, test_labels = make_digits(1000, seed=1)
    with torch.no_grad():
        predictions = model.module(torch.from_numpy(test_images)).argmax(dim=1)
    accuracy = (predictions == torch.from_numpy(test_labels)).float().mean().item()
    ranks = torch.ones(1)
    dist.all_reduce(ranks)
    if rank == 0:
        os.makedirs(checkpoint_dir, exist_ok=True)
        model_file = os.path.join(checkpoint_dir, "model.pt")
        torch.save(model.module.state_dict(), model_file)
        print(f"rank {rank} wrote {model_file}", flush=True)
    dist.barrier()  # all ranks tear the process group down together (see ddp_torch_mnist.py)
    dist.destroy_process_group()
    return {"ranks": int(ranks.item()), "losses": epoch_losses, "accuracy": accuracy}


def main():
    args = training_arguments(default_lr=0.04).parse_args()
    # The helper modules `train` imports must be importable by every rank.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
    result = trainrun.run(train, args.lr, args.epochs, args.batch_size, args.train_size, args.checkpoint_dir,
                          backend="torch", num_processes=2)
    print(json.dumps({"workflow": "trainrun-run-torch", **result}), flush=True)


if __name__ == "__main__":
    main()
