"""MNIST-shaped data made on the spot (nothing can be downloaded at run time).

Each of the ten classes is a fixed random stroke pattern on a 28x28 canvas; samples are that
pattern shifted by up to two pixels, scaled and noised, so a small CNN separates them well
but not from the first batch.
"""
from __future__ import annotations

import argparse

import numpy as np

NUM_CLASSES = 10
SIDE = 28


def class_prototypes(seed: int = 1234) -> np.ndarray:
    rng = np.random.default_rng(seed)
    prototypes = np.zeros((NUM_CLASSES, SIDE, SIDE), dtype=np.float32)
    for label in range(NUM_CLASSES):
        for _ in range(4):
            row, col = rng.integers(6, 22, size=2)
            length = rng.integers(6, 12)
            if rng.random() < 0.5:
                prototypes[label, row, max(col - length // 2, 0):col + length // 2] = 1.0
            else:
                prototypes[label, max(row - length // 2, 0):row + length // 2, col] = 1.0
    return prototypes


def make_digits(count: int, seed: int, noise: float = 0.35) -> tuple[np.ndarray, np.ndarray]:
    """Returns images of shape (count, 1, 28, 28) in [0, 1] and integer labels of shape (count,)."""
    rng = np.random.default_rng(seed)
    prototypes = class_prototypes()
    labels = rng.integers(0, NUM_CLASSES, size=count)
    images = np.empty((count, 1, SIDE, SIDE), dtype=np.float32)
    for index, label in enumerate(labels):
        shifted = np.roll(prototypes[label], shift=tuple(rng.integers(-2, 3, size=2)), axis=(0, 1))
        image = shifted * rng.uniform(0.6, 1.0) + rng.normal(0.0, noise, size=(SIDE, SIDE))
        images[index, 0] = np.clip(image, 0.0, 1.0)
    return images, labels.astype(np.int64)


def training_arguments(default_lr: float) -> argparse.ArgumentParser:
    """The options every example takes; scripts add their own before parsing."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=default_lr)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--train-size", type=int, default=3000)
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    return parser
