"""A model folder as the Hugging Face Hub holds one, made and loaded back without the Hub:

    python hub_folder.py save DIR   # a small GPT-2 from its config and a BPE tokenizer, save_pretrained into DIR
    python hub_folder.py load DIR   # both loaded back from DIR by path; then a Hub name, which HF_HUB_OFFLINE refuses

`load` prints one JSON line: the folder's files, the model's parameter count, the tokens the model generated, and the
error a Hub name gave.
"""
import json
import os
import sys

from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

CORPUS = ["a model folder as the hub holds one", "config, weights and tokenizer in one folder"] * 10


def save(folder: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=64, special_tokens=["<unk>", "<eos>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", eos_token="<eos>")
    config = GPT2Config(vocab_size=fast.vocab_size, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    GPT2LMHeadModel(config).save_pretrained(folder)
    fast.save_pretrained(folder)


def load(folder: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    inputs = tokenizer("a model folder", return_tensors="pt")
    generated = model.generate(**inputs, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    try:
        AutoModelForCausalLM.from_pretrained("openai-community/gpt2")
        hub_error = None
    except OSError as err:
        hub_error = f"{type(err).__name__}: {err}"
    print(json.dumps({"files": sorted(os.listdir(folder)), "parameters": model.num_parameters(),
                      "generated": generated.shape[1] - inputs["input_ids"].shape[1], "hub_error": hub_error}),
          flush=True)


if __name__ == "__main__":
    {"save": save, "load": load}[sys.argv[1]](sys.argv[2])
