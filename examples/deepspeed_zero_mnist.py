"""DeepSpeed ZeRO as users launch it: torchrun (`trainrun torch --nproc-per-node 2 deepspeed_zero_mnist.py
--deepspeed --deepspeed_config deepspeed_zero2.json`) or DeepSpeed's own launcher (`deepspeed --num_accelerators 2
deepspeed_zero_mnist.py --deepspeed --deepspeed_config deepspeed_zero3.json`), on GPUs with NCCL or on CPU, where
DeepSpeed picks its CPU accelerator and Gloo.

The config file holds the ZeRO stage, the micro batch and the optimizer ("torch_adam": true, torch's AdamW: nothing
for DeepSpeed to compile). Every rank saves its shard of the ZeRO checkpoint, which is then loaded back into a fresh
engine and must give the same predictions; rank 0 alone writes the whole model (save_16bit_model) and prints a JSON
summary line.

At each epoch's end the ranks save a ZeRO checkpoint (DeepSpeed's save_checkpoint, the epoch and losses in its client
state) into --checkpoint-dir/zero, a folder every rank shares, and a run started again resumes from the newest one
(load_checkpoint): a run stopped, killed or requeued loses at most the epoch it was in. DeepSpeed finds the newest
through the folder's `latest` file, which it writes in place, and before the other ranks have finished their shards;
the example writes `latest` itself once every rank's shard is written, under another name then renamed, so a kill
during a save leaves `latest` naming the previous, complete checkpoint.
"""
import argparse
import json
import os

import deepspeed
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from digit_net import DigitNet
from synthetic_digits import make_digits


def engine_for(args, seed):
    torch.manual_seed(seed)
    model = DigitNet()
    engine, _, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters())
    return engine


def predict(engine, images):
    """Every rank runs the forward pass: under ZeRO-3 each holds a part of the weights and they gather them."""
    engine.eval()
    with torch.no_grad():
        return engine(images.to(engine.device)).argmax(dim=1).cpu()


def save_epoch(engine, zero_dir, epoch, epoch_losses):
    """Every rank's shard of the epoch's checkpoint; then rank 0 points `latest` at it."""
    tag = f"epoch-{epoch}"
    engine.save_checkpoint(zero_dir, tag=tag, client_state={"epoch": epoch, "epoch_losses": epoch_losses},
                           save_latest=False)  # ends in a barrier: every shard is written
    if dist.get_rank() == 0:
        partial = os.path.join(zero_dir, "latest.partial")
        with open(partial, "w") as latest:
            latest.write(tag)
            latest.flush()
            os.fsync(latest.fileno())
        os.replace(partial, os.path.join(zero_dir, "latest"))
    dist.barrier()


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()  # the batch size and the optimizer are the DeepSpeed config's
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--train-size", type=int, default=3000)
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    parser.add_argument("--local-rank", "--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    return deepspeed.add_config_arguments(parser)  # --deepspeed, --deepspeed_config


def train(args) -> dict:
    """Trains, checkpoints and loads back on every rank; returns this rank's summary."""
    deepspeed.init_distributed()  # NCCL on GPUs; Gloo with DeepSpeed's CPU accelerator
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    engine = engine_for(args, seed=42)
    stage = engine.zero_optimization_stage()

    images, labels = make_digits(args.train_size, seed=0)
    train_set = TensorDataset(torch.from_numpy(images), torch.from_numpy(labels))
    sampler = DistributedSampler(train_set)
    loader = DataLoader(train_set, batch_size=engine.train_micro_batch_size_per_gpu(), sampler=sampler)
    print(f"rank {rank} of {world} trains on {len(sampler)} images with ZeRO stage {stage}", flush=True)

    zero_dir = os.path.join(args.checkpoint_dir, "zero")
    first_epoch, epoch_losses = 0, []
    resumed_from, client_state = engine.load_checkpoint(zero_dir)  # (None, None) without a `latest` there
    if resumed_from:
        first_epoch, epoch_losses = client_state["epoch"], client_state["epoch_losses"]
        if rank == 0:
            print(f"resumed from step {engine.global_steps} ({resumed_from})", flush=True)
    for epoch in range(first_epoch, args.epochs):
        engine.train()
        sampler.set_epoch(epoch)
        total = torch.zeros(1, device=engine.device)  # NCCL reduces tensors on the GPU only
        for batch_images, batch_labels in loader:
            loss = F.cross_entropy(engine(batch_images.to(engine.device)), batch_labels.to(engine.device))
            engine.backward(loss)
            engine.step()
            total += loss.detach()
        dist.all_reduce(total)
        epoch_losses.append(total.item() / world / len(loader))
        if rank == 0:
            print(f"epoch {epoch} loss {epoch_losses[-1]:.4f} (ZeRO stage {stage})", flush=True)
        save_epoch(engine, zero_dir, epoch + 1, epoch_losses)

    test_images, test_labels = make_digits(1000, seed=1)
    test_images = torch.from_numpy(test_images)
    predictions = predict(engine, test_images)
    accuracy = (predictions == torch.from_numpy(test_labels)).float().mean().item()
    if rank == 0:
        print(f"accuracy {accuracy:.3f}", flush=True)

    # The ZeRO checkpoint: each rank writes its own shard of the optimizer state (and, under ZeRO-3, of the
    # weights), all into one folder the ranks share (one host here; a shared file system across hosts).
    engine.save_checkpoint(zero_dir, tag="final", save_latest=False)  # `latest` stays the last epoch's
    restored = engine_for(args, seed=7)  # other initial weights: the loaded checkpoint must replace them
    restored.load_checkpoint(zero_dir, tag="final")
    restored_same = bool(torch.equal(predict(restored, test_images), predictions))
    shards = sorted(name for name in os.listdir(os.path.join(zero_dir, "final")) if name.startswith("zero_pp_rank_"))

    ranks = torch.ones(1, device=engine.device)
    dist.all_reduce(ranks)
    checkpoint = os.path.join(args.checkpoint_dir, "model.pt")
    if engine.save_16bit_model(args.checkpoint_dir, "model.pt") and rank == 0:
        print(f"rank {rank} wrote {checkpoint}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return {"workflow": f"deepspeed-zero{stage}", "rank": rank, "ranks": int(ranks.item()), "losses": epoch_losses,
            "accuracy": accuracy, "zero_stage": stage, "zero_shards": shards, "checkpoint_loaded_back": restored_same}


def main():
    parser = arguments()
    args = parser.parse_args()
    if not args.deepspeed_config:
        parser.error("--deepspeed_config: the path of a DeepSpeed config, e.g. deepspeed_zero2.json")
    summary = train(args)
    if summary["rank"] == 0:
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
