"""PyTorch DDP as users launch it with torchrun / torch.distributed.launch (`trainrun torch --nproc-per-node 2`).

The device comes from LOCAL_RANK (or the legacy --local-rank argument torch.distributed.launch
passes). Every --checkpoint-every steps and at each epoch's end rank 0 writes a checkpoint (model, optimizer, where
in the data the run is, the epoch's loss so far) through trainrun.checkpoint; SIGTERM or SIGUSR1 (a time limit,
preemption, torchrun's agent) makes every rank save at the next of those steps and end. A run started again resumes
from the newest complete checkpoint and says so in one line; one of another world size starts that epoch again. Rank 0
writes the final model and prints a JSON summary line.
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
from trainrun import checkpoint


def any_rank(flag, device):
    """Whether `flag` is set on any rank: every rank then stops at the same step."""
    flags = torch.tensor([float(flag)], device=device)
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return bool(flags.item())


def same_on_every_rank(number, device):
    """Whether every rank holds the same `number` (each loads the checkpoint it finds)."""
    low, high = torch.tensor([number], device=device), torch.tensor([number], device=device)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return low.item() == high.item()


def main():
    parser = training_arguments(default_lr=0.04)
    parser.add_argument("--local-rank", "--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    parser.add_argument("--checkpoint-every", type=int, default=20, help="steps between checkpoints")
    args = parser.parse_args()
    stop = checkpoint.stop_on_signals()

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

    # Where the run is: epochs done, batches of this epoch done, optimizer steps, the epoch's loss sum of every rank.
    step, first_epoch, done_batches, epoch_losses, loss_sum = 0, 0, 0, [], 0.0
    resumed = checkpoint.latest(args.checkpoint_dir)
    if not same_on_every_rank(resumed.step if resumed else -1, device):
        raise SystemExit(f"rank {rank}: the ranks found different newest checkpoints in {args.checkpoint_dir} "
                         "(this rank: " + (resumed.path.name if resumed else "none") + "): --checkpoint-dir must "
                         "be a folder every rank shares")
    if resumed:
        saved = torch.load(resumed.path / "state.pt", map_location=device)
        model.module.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step, first_epoch, epoch_losses = saved["step"], saved["epoch"], saved["epoch_losses"]
        if saved["world"] == world:  # another world size splits the data otherwise: the epoch starts again
            done_batches, loss_sum = saved["done_batches"], saved["loss_sum"]
        if rank == 0:
            print(resumed.message(), flush=True)

    def save(epoch, batches, total):
        """Every rank's loss sum so far, then rank 0 writes where the run is."""
        summed = total.clone()
        dist.all_reduce(summed)
        if rank == 0:
            with checkpoint.writing(args.checkpoint_dir, step) as folder:
                torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                            "epoch": epoch, "done_batches": batches, "epoch_losses": epoch_losses,
                            "loss_sum": summed.item(), "world": world}, folder / "state.pt")

    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)
        # The loss sum carried over from a checkpoint is every rank's: rank 0 holds it, the all-reduce adds the rest.
        total = torch.full((1,), loss_sum if rank == 0 else 0.0, device=device)
        for batch, (batch_images, batch_labels) in enumerate(loader):
            if batch < done_batches:
                continue
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch_images.to(device)), batch_labels.to(device))
            loss.backward()
            optimizer.step()
            total += loss.detach()
            step += 1
            if step % args.checkpoint_every == 0:
                stopping = stop.agreed(lambda flag: any_rank(flag, device))
                save(epoch, batch + 1, total)
                if stopping:
                    dist.barrier()
                    dist.destroy_process_group()
                    raise SystemExit(checkpoint.STOPPED)
        done_batches, loss_sum = 0, 0.0
        dist.all_reduce(total)
        epoch_losses.append(total.item() / world / len(loader))
        if rank == 0:
            print(f"epoch {epoch} loss {epoch_losses[-1]:.4f}", flush=True)
        save(epoch + 1, 0, torch.zeros(1, device=device))

    test_images, test_labels = make_digits(1000, seed=1)
    with torch.no_grad():
        predictions = model.module(torch.from_numpy(test_images).to(device)).argmax(dim=1).cpu()
    accuracy = (predictions == torch.from_numpy(test_labels)).float().mean().item()
    ranks = torch.ones(1, device=device)
    dist.all_reduce(ranks)
    if rank == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        model_file = os.path.join(args.checkpoint_dir, "model.pt")
        torch.save(model.module.state_dict(), model_file)
        print(f"rank {rank} wrote {model_file}", flush=True)
        print(json.dumps({"workflow": "ddp-torch", "ranks": int(ranks.item()), "losses": epoch_losses,
                          "accuracy": accuracy}), flush=True)
    # Every rank leaves together, so none tears its sockets down while a peer still uses them.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
