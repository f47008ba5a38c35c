"""A plain training loop made distributed with Hugging Face accelerate, as users launch it with
`accelerate launch --num_processes 2 accelerate_causal_lm.py`.

    accelerate launch --num_processes 2 accelerate_causal_lm.py [--epochs E] [--lr LR] [--checkpoint-dir DIR]

The loop is the one a single process would run; `accelerator.prepare` wraps the model for DDP and gives each rank its
share of the batches, `accelerator.backward` replaces `loss.backward`. The model is examples/hf_causal_lm.py's tiny
GPT-2 on the made-up text (made_up_text.py). At each epoch's end every rank saves its part of accelerate's own
checkpoint (`accelerator.save_state`: the model, the optimizer, each rank's RNG states and the run's progress,
registered with `register_for_checkpointing`) into one trainrun.checkpoint folder, which rank 0 renames `step-N` once
all have written; a run started again loads the newest (`accelerator.load_state`) and says so in one line. Rank 0 alone writes
the model (`accelerator.save_model`) and prints a JSON summary line.
"""
import argparse
import contextlib
import json

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import broadcast_object_list
from torch.utils.data import DataLoader
from transformers import DataCollatorForLanguageModeling, GPT2LMHeadModel

from made_up_text import make_lines, next_word_accuracy, text_dataset, tiny_gpt2_config, train_tokenizer
from trainrun import checkpoint


class Progress:
    """Where the run is, saved with accelerate's checkpoint (register_for_checkpointing): epochs done, their losses."""

    def __init__(self):
        self.epoch, self.losses = 0, []

    def state_dict(self):
        return {"epoch": self.epoch, "losses": self.losses}

    def load_state_dict(self, state):
        self.epoch, self.losses = state["epoch"], state["losses"]


def save_state(accelerator, folder, step):
    """accelerate's checkpoint as one trainrun.checkpoint folder `step-N`: rank 0 opens it under a temporary name,
    every rank writes its files into it, and once all have, rank 0 fsyncs it and renames it (the newest 2 kept)."""
    writing = checkpoint.writing(folder, step, keep=2) if accelerator.is_main_process else contextlib.nullcontext()
    with writing as partial:
        (path,) = broadcast_object_list([str(partial) if partial else None])
        accelerator.save_state(path)
        accelerator.wait_for_everyone()
    accelerator.wait_for_everyone()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    args = parser.parse_args()

    # A seeded sampler: each epoch's shuffle follows from the seed and the epoch (set_epoch), so a resumed run's
    # epochs see the batches an unbroken run's would.
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True))
    lines = make_lines(2000, seed=0)
    tokenizer = train_tokenizer(lines)
    torch.manual_seed(42)
    model = GPT2LMHeadModel(tiny_gpt2_config(tokenizer))
    loader = DataLoader(text_dataset(tokenizer, lines), batch_size=args.batch_size, shuffle=True,
                        collate_fn=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    resumed = checkpoint.latest(args.checkpoint_dir)
    if resumed:
        accelerator.load_state(str(resumed.path))
        accelerator.print(resumed.message())

    epoch_losses = progress.losses
    for epoch in range(progress.epoch, args.epochs):
        loader.set_epoch(epoch)
        model.train()
        total = torch.zeros(1, device=accelerator.device)
        for batch in loader:
            optimizer.zero_grad()
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            total += loss.detach()
        epoch_losses.append(accelerator.reduce(total, reduction="mean").item() / len(loader))
        accelerator.print(f"epoch {epoch} loss {epoch_losses[-1]:.4f}")
        progress.epoch = epoch + 1
        save_state(accelerator, args.checkpoint_dir, progress.epoch * len(loader))

    accuracy = next_word_accuracy(accelerator.unwrap_model(model), tokenizer, make_lines(500, seed=1))
    accelerator.save_model(model, args.checkpoint_dir)  # model.safetensors, on rank 0 only
    ranks = accelerator.reduce(torch.ones(1, device=accelerator.device), reduction="sum").item()
    if accelerator.is_main_process:
        print(f"rank {accelerator.process_index} wrote {args.checkpoint_dir}/model.safetensors", flush=True)
        print(json.dumps({"workflow": "accelerate-launch", "ranks": int(ranks), "losses": epoch_losses,
                          "accuracy": accuracy}), flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
