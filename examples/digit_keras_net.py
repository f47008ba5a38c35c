"""The small CNN every Keras example trains on the synthetic digits (channels last).

It builds with whichever Keras `tf.keras` is: Keras 3 by default, Keras 2 with TF_USE_LEGACY_KERAS=1.
"""
import tensorflow as tf


def digit_keras_net() -> tf.keras.Model:
    return tf.keras.Sequential([
        tf.keras.layers.Input(shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(8, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(16, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(10),
    ])
