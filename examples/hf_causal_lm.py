"""Hugging Face's Trainer on a tiny causal LM, as users launch it with torchrun (`trainrun torch --nproc-per-node 2
hf_causal_lm.py`), optionally under DeepSpeed ZeRO through `TrainingArguments(deepspeed="deepspeed_zero2.json")`.

    trainrun torch --nproc-per-node 2 hf_causal_lm.py [--deepspeed ds.json] [--epochs E] [--checkpoint-dir DIR]

The model is a GPT-2 built from a config and the tokenizer is trained on the made-up text (made_up_text.py): nothing
is downloaded. The Trainer finds the ranks in torchrun's environment (through accelerate) and logs each epoch's loss,
averaged over the ranks. Rank 0 alone writes the model and the tokenizer and prints a JSON summary line.

The Trainer saves a checkpoint at each epoch's end (`checkpoint-STEP` in --checkpoint-dir, a folder every rank
shares; the newest two kept), and a run started again resumes from the newest complete one
(`train(resume_from_checkpoint=...)`): its weights, optimizer, scheduler, RNG states and log history. The Trainer
writes a checkpoint's files in place and its `trainer_state.json` last, so a folder without one is a save a kill cut
off, which the example passes over (transformers' own `get_last_checkpoint` would pick it).
"""
import argparse
import json
import os
import re

from made_up_text import make_lines, next_word_accuracy, text_dataset, tiny_gpt2_config, train_tokenizer


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    parser.add_argument("--deepspeed", help="a DeepSpeed config (JSON file) for TrainingArguments(deepspeed=...)")
    parser.add_argument("--report-to", default="none", help="TrainingArguments(report_to=...), e.g. mlflow")
    return parser


def newest_complete_checkpoint(folder: str) -> tuple[int, str] | None:
    """The step and path of the newest `checkpoint-STEP` that holds its trainer_state.json, the file the Trainer
    writes last."""
    names = os.listdir(folder) if os.path.isdir(folder) else []
    steps = sorted((int(name.removeprefix("checkpoint-")) for name in names if re.fullmatch(r"checkpoint-\d+", name)),
                   reverse=True)
    for step in steps:
        path = os.path.join(folder, f"checkpoint-{step}")
        if os.path.isfile(os.path.join(path, "trainer_state.json")):
            return step, path
    return None


def train(args: argparse.Namespace) -> dict:
    """Trains on every rank; returns the summary (rank 0's is the one printed)."""
    import torch
    from transformers import DataCollatorForLanguageModeling, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed

    lines = make_lines(args.train_size, seed=0)
    tokenizer = train_tokenizer(lines)
    set_seed(42)
    model = GPT2LMHeadModel(tiny_gpt2_config(tokenizer))
    training_args = TrainingArguments(
        output_dir=args.checkpoint_dir, num_train_epochs=args.epochs, learning_rate=args.lr,
        per_device_train_batch_size=args.batch_size, logging_strategy="epoch", save_strategy="epoch",
        save_total_limit=2,
        report_to=args.report_to, deepspeed=args.deepspeed, disable_tqdm=True,
        use_cpu=not torch.cuda.is_available())  # on CPUs, without it each rank would train alone
    trainer = Trainer(model=model, args=training_args, train_dataset=text_dataset(tokenizer, lines),
                      processing_class=tokenizer, data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    resumed = newest_complete_checkpoint(args.checkpoint_dir)
    if resumed and training_args.process_index == 0:
        print(f"resumed from step {resumed[0]} ({resumed[1]})", flush=True)
    trainer.train(resume_from_checkpoint=resumed[1] if resumed else None)

    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    accuracy = next_word_accuracy(trainer.model, tokenizer, make_lines(500, seed=1))
    trainer.save_model()  # the model, its config and the tokenizer, on rank 0 only
    summary = {"workflow": "hf-trainer", "rank": training_args.process_index, "ranks": training_args.world_size,
               "losses": losses, "accuracy": accuracy}
    if args.deepspeed:
        summary["deepspeed_zero_stage"] = trainer.model_wrapped.zero_optimization_stage()
    return summary


def main():
    args = arguments().parse_args()
    summary = train(args)
    if summary["rank"] == 0:
        print(f"rank 0 wrote {args.checkpoint_dir}/model.safetensors", flush=True)
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
