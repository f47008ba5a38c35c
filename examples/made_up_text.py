"""Text made on the spot, a tokenizer trained on it and a tiny GPT-2 built from a config, for the Hugging Face
examples (nothing is downloaded at run time: no model, no tokenizer, no data set).

Each line counts up from a random number word for LINE_WORDS words ("seven eight nine ... fourteen"), wrapping
after nineteen (or down, for the LoRA example's new task). A causal LM cannot guess a line's first word, but every
word after it follows from the one before; it learns that within a few epochs, and its accuracy on the words after
the first of held-out lines says so.
"""
from __future__ import annotations

import random

NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                "sixteen seventeen eighteen nineteen").split()
LINE_WORDS = 8
PAD, UNK, EOS = "[PAD]", "[UNK]", "[EOS]"


def make_lines(count: int, seed: int, step: int = 1) -> list[str]:
    """`count` lines of LINE_WORDS number words counting from a random start, up (step 1) or down (step -1)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        start = rng.randrange(len(NUMBER_WORDS))
        lines.append(" ".join(NUMBER_WORDS[(start + step * word) % len(NUMBER_WORDS)] for word in range(LINE_WORDS)))
    return lines


def train_tokenizer(lines: list[str]):
    """A word-level tokenizer trained on the lines (tokenizers), wrapped as transformers' fast tokenizer; every
    encoded line ends with EOS."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(lines, trainers.WordLevelTrainer(special_tokens=[PAD, UNK, EOS]))
    tokenizer.post_processor = processors.TemplateProcessing(single=f"$A {EOS}",
                                                             special_tokens=[(EOS, tokenizer.token_to_id(EOS))])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, unk_token=UNK, eos_token=EOS)


def tiny_gpt2_config(tokenizer):
    """A two-layer GPT-2 of 32-wide embeddings over the tokenizer's vocabulary (about 35k parameters)."""
    from transformers import GPT2Config

    return GPT2Config(vocab_size=len(tokenizer), n_positions=16, n_embd=32, n_layer=2, n_head=2,
                      bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id)


def text_dataset(tokenizer, lines: list[str]):
    """The lines as a tokenized data set (datasets), as `load_dataset("text", ...)` and `.map` would give them."""
    from datasets import Dataset

    return Dataset.from_dict({"text": lines}).map(lambda batch: tokenizer(batch["text"]), batched=True,
                                                  remove_columns=["text"])


def next_word_accuracy(model, tokenizer, lines: list[str]) -> float:
    """How often the model's most likely next token is the line's next word, over every word after the first."""
    import torch

    input_ids = torch.tensor(tokenizer(lines)["input_ids"], device=model.device)
    model.eval()
    with torch.no_grad():
        predicted = model(input_ids=input_ids).logits.argmax(dim=-1)
    # The prediction at position i is for token i + 1; the first word (position 0) cannot be predicted.
    hits = predicted[:, :LINE_WORDS - 1] == input_ids[:, 1:LINE_WORDS]
    return hits.float().mean().item()
