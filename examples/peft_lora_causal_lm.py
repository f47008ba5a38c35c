"""A LoRA fine-tune with PEFT under Hugging Face's Trainer on two ranks (`trainrun torch --nproc-per-node 2
peft_lora_causal_lm.py`): the adapter is saved, then loaded back onto the base model from disk.

    trainrun torch --nproc-per-node 2 peft_lora_causal_lm.py [--epochs E] [--lr LR] [--checkpoint-dir DIR]

The base model stands for one from the Hub: examples/hf_causal_lm.py trains its tiny GPT-2 to count up and saves it
with its tokenizer, which this loads with from_pretrained (nothing is downloaded). The new task is counting down.
LoRA adapters on the attention and MLP layers are all that trains; the base weights stay frozen. The Trainer saves a
checkpoint of the adapter at each epoch's end, and a run started again resumes from the newest complete one, as
examples/hf_causal_lm.py does (the base's training, finished, resumes at its end). Rank 0 alone writes the adapter,
loads it back onto a fresh copy of the base and checks that it gives the trained model's logits, and prints a JSON
summary line.
"""
import argparse
import json
import os

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import (AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer,
                          TrainingArguments)

import hf_causal_lm
from made_up_text import make_lines, next_word_accuracy, text_dataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    args = parser.parse_args()
    base_dir = os.path.join(args.checkpoint_dir, "base")
    adapter_dir = os.path.join(args.checkpoint_dir, "lora")

    # The "pretrained" model, as a download from the Hub would leave it: weights, config and tokenizer in a folder.
    hf_causal_lm.train(hf_causal_lm.arguments().parse_args(["--epochs", "6", "--checkpoint-dir", base_dir]))
    torch.distributed.barrier()  # rank 0 has written it

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    lora = LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=16, lora_dropout=0.0, fan_in_fan_out=True,
                      target_modules=["c_attn", "c_proj", "c_fc"])
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir), lora)
    trainable, total = model.get_nb_trainable_parameters()
    training_args = TrainingArguments(
        output_dir=adapter_dir, num_train_epochs=args.epochs, learning_rate=args.lr,
        per_device_train_batch_size=args.batch_size, logging_strategy="epoch", save_strategy="epoch",
        save_total_limit=2, report_to="none", disable_tqdm=True, use_cpu=not torch.cuda.is_available())
    trainer = Trainer(model=model, args=training_args, train_dataset=text_dataset(tokenizer, make_lines(2000, 2, -1)),
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    resumed = hf_causal_lm.newest_complete_checkpoint(adapter_dir)
    if resumed and training_args.process_index == 0:
        print(f"resumed from step {resumed[0]} ({resumed[1]})", flush=True)
    trainer.train(resume_from_checkpoint=resumed[1] if resumed else None)

    test_lines = make_lines(500, seed=3, step=-1)
    accuracy = next_word_accuracy(model, tokenizer, test_lines)
    trainer.save_model()  # PeftModel.save_pretrained: the adapter and its config, on rank 0 only
    if trainer.is_world_process_zero():
        print(f"rank 0 wrote {adapter_dir}/adapter_model.safetensors", flush=True)
        loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), adapter_dir)
        loaded.to(model.device).eval()
        probe = torch.tensor(tokenizer(test_lines[:100])["input_ids"], device=model.device)
        with torch.no_grad():
            same = torch.allclose(model(input_ids=probe).logits, loaded(input_ids=probe).logits, atol=1e-5)
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        print(json.dumps({"workflow": "peft-lora", "ranks": training_args.world_size, "losses": losses,
                          "accuracy": accuracy, "trainable_parameters": trainable, "parameters": total,
                          "adapter_loaded_back": same}), flush=True)


if __name__ == "__main__":
    main()
