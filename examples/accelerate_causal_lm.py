"""A plain training loop made distributed with Hugging Face accelerate, as users launch it with
`accelerate launch --num_processes 2 accelerate_causal_lm.py`.

    accelerate launch --num_processes 2 accelerate_causal_lm.py [--epochs E] [--lr LR] [--checkpoint-dir DIR]

The loop is the one a single process would run; `accelerator.prepare` wraps the model for DDP and gives each rank its
share of the batches, `accelerator.backward` replaces `loss.backward`. The model is examples/hf_causal_lm.py's tiny
GPT-2 on the made-up text (made_up_text.py). Rank 0 alone writes the model (`accelerator.save_model`) and prints a
JSON summary line.
"""
import argparse
import json

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import DataCollatorForLanguageModeling, GPT2LMHeadModel

from made_up_text import make_lines, next_word_accuracy, text_dataset, tiny_gpt2_config, train_tokenizer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    args = parser.parse_args()

    accelerator = Accelerator()
    lines = make_lines(2000, seed=0)
    tokenizer = train_tokenizer(lines)
    torch.manual_seed(42)
    model = GPT2LMHeadModel(tiny_gpt2_config(tokenizer))
    loader = DataLoader(text_dataset(tokenizer, lines), batch_size=args.batch_size, shuffle=True,
                        collate_fn=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    epoch_losses = []
    for epoch in range(args.epochs):
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
