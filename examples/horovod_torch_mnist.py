"""The classic Horovod + PyTorch recipe, unchanged from what users run elsewhere.

Run with `trainrun mpi -np 2 -- python horovod_torch_mnist.py` or `mpirun -np 2 python horovod_torch_mnist.py`.
Every --checkpoint-every steps and at each epoch's end rank 0 writes a checkpoint through trainrun.checkpoint;
SIGTERM or SIGUSR1 (a time limit, a requeue, preemption) makes every rank save at the next of those steps and end. A
run started again resumes from the newest complete checkpoint and says so in one line; one of another world size
starts that epoch again. Rank 0 writes the final model and prints a JSON summary line.
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
from trainrun import checkpoint


def any_rank(flag):
    """Whether `flag` is set on any rank: every rank then stops at the same step."""
    return bool(hvd.allreduce(torch.tensor([float(flag)]), name="stop", op=hvd.Max).item())


def main():
    parser = training_arguments(default_lr=0.02)
    parser.add_argument("--checkpoint-every", type=int, default=20, help="steps between checkpoints")
    args = parser.parse_args()
    stop = checkpoint.stop_on_signals()

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

    # Where the run is: epochs done, batches of this epoch done, optimizer steps, the epoch's loss sum of every rank.
    # Rank 0 loads the newest checkpoint and broadcasts it, as Horovod's own examples resume: the other ranks need
    # not see rank 0's folder.
    step, first_epoch, done_batches, epoch_losses, loss_sum, world = 0, 0, 0, [], 0.0, hvd.size()
    resumed = checkpoint.latest(args.checkpoint_dir) if hvd.rank() == 0 else None
    if resumed:
        saved = torch.load(resumed.path / "state.pt", map_location=device)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step, first_epoch, epoch_losses, world = saved["step"], saved["epoch"], saved["epoch_losses"], saved["world"]
        done_batches, loss_sum = saved["done_batches"], saved["loss_sum"]
        print(resumed.message(), flush=True)
    step, first_epoch, done_batches, epoch_losses, world = hvd.broadcast_object(
        (step, first_epoch, done_batches, epoch_losses, world), root_rank=0, name="resumed")
    if world != hvd.size():  # another world size splits the data otherwise: the epoch starts again
        done_batches, loss_sum = 0, 0.0
        for group in optimizer.param_groups:  # the learning rate scales with the world size
            group["lr"] = args.lr * hvd.size()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    def save(epoch, batches, total):
        """Every rank's loss sum so far, then rank 0 writes where the run is."""
        summed = hvd.allreduce(total, name="loss_sum", op=hvd.Sum)
        if hvd.rank() == 0:
            with checkpoint.writing(args.checkpoint_dir, step) as folder:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                            "epoch": epoch, "done_batches": batches, "epoch_losses": epoch_losses,
                            "loss_sum": summed.item(), "world": hvd.size()}, folder / "state.pt")

    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        # The loss sum carried over from a checkpoint is every rank's: rank 0 holds it, the allreduce adds the rest.
        total = torch.full((1,), loss_sum if hvd.rank() == 0 else 0.0)
        for batch, (batch_images, batch_labels) in enumerate(loader):
            if batch < done_batches:
                continue
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch_images.to(device)), batch_labels.to(device))
            loss.backward()
            optimizer.step()
            total += loss.detach().cpu()
            step += 1
            if step % args.checkpoint_every == 0:
                stopping = stop.agreed(any_rank)
                save(epoch, batch + 1, total)
                if stopping:
                    raise SystemExit(checkpoint.STOPPED)
        done_batches, loss_sum = 0, 0.0
        epoch_loss = hvd.allreduce(total / len(loader), name="epoch_loss").item()
        epoch_losses.append(epoch_loss)
        if hvd.rank() == 0:
            print(f"epoch {epoch} loss {epoch_loss:.4f}", flush=True)
        save(epoch + 1, 0, torch.zeros(1))

    test_images, test_labels = make_digits(1000, seed=1)
    model.eval()
    with torch.no_grad():
        predictions = model(torch.from_numpy(test_images).to(device)).argmax(dim=1).cpu()
    accuracy = (predictions == torch.from_numpy(test_labels)).float().mean().item()
    ranks_seen = int(hvd.allreduce(torch.ones(1), name="ranks", op=hvd.Sum).item())

    if hvd.rank() == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        model_file = os.path.join(args.checkpoint_dir, "model.pt")
        torch.save(model.state_dict(), model_file)
        print(f"rank {hvd.rank()} wrote {model_file}", flush=True)
        print(json.dumps({"workflow": "horovod-torch", "ranks": ranks_seen, "losses": epoch_losses,
                          "accuracy": accuracy}), flush=True)


if __name__ == "__main__":
    main()
