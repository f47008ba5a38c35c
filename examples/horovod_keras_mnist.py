"""The classic Horovod + Keras recipe (horovod.tensorflow.keras), run with `trainrun mpi -np 2` or `mpirun -np 2`.

`tf.keras` is Keras 3 by default (the image's Horovod is patched for it) and Keras 2 with
TF_USE_LEGACY_KERAS=1. Rank 0 alone writes the checkpoint; the summary says whether every rank
ended with the same weights.
"""
import json
import os

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

from digit_keras_net import digit_keras_net
from synthetic_digits import make_digits, training_arguments


def main():
    parser = training_arguments(default_lr=0.02)
    args = parser.parse_args()

    hvd.init()
    tf.random.set_seed(42)
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.experimental.set_memory_growth(gpus[hvd.local_rank()], True)
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")

    images, labels = make_digits(args.train_size, seed=0)
    images = np.transpose(images, (0, 2, 3, 1))
    shard = tf.data.Dataset.from_tensor_slices((images, labels)).shard(hvd.size(), hvd.rank())
    dataset = shard.shuffle(1024, seed=hvd.rank()).batch(args.batch_size).repeat()
    steps_per_epoch = args.train_size // hvd.size() // args.batch_size

    model = digit_keras_net()
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9))
    model.compile(optimizer=optimizer, metrics=["accuracy"],
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]
    if hvd.rank() == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        callbacks.append(tf.keras.callbacks.ModelCheckpoint(os.path.join(args.checkpoint_dir, "model.weights.h5"),
                                                            save_weights_only=True))
    history = model.fit(dataset, steps_per_epoch=steps_per_epoch, epochs=args.epochs, callbacks=callbacks,
                        verbose=2 if hvd.rank() == 0 else 0)

    test_images, test_labels = make_digits(1000, seed=1)
    _, accuracy = model.evaluate(np.transpose(test_images, (0, 2, 3, 1)), test_labels, verbose=0)
    ranks_seen = int(hvd.allreduce(tf.constant(1.0), op=hvd.Sum).numpy())
    weights = np.concatenate([w.ravel() for w in model.get_weights()])
    every_rank = hvd.allgather(tf.constant(weights[None, :])).numpy()
    if hvd.rank() == 0:
        print(f"rank {hvd.rank()} wrote {args.checkpoint_dir}/model.weights.h5", flush=True)
        print(json.dumps({"workflow": "horovod-keras", "keras": getattr(tf.keras, "__version__", "2 (tf_keras)"),
                          "ranks": ranks_seen, "losses": [float(loss) for loss in history.history["loss"]],
                          "accuracy": float(accuracy),
                          "same_weights_on_every_rank": bool((every_rank == every_rank[0]).all())}), flush=True)


if __name__ == "__main__":
    main()
