"""The classic Horovod + Keras recipe (horovod.tensorflow.keras), run with `trainrun mpi -np 2` or `mpirun -np 2`.

`tf.keras` is Keras 3 by default (the image's Horovod is patched for it) and Keras 2 with
TF_USE_LEGACY_KERAS=1. Rank 0 alone writes the checkpoints; the summary says whether every rank
ended with the same weights.

At each epoch's end rank 0 writes a checkpoint through trainrun.checkpoint (the weights, the optimizer's momentum
and the losses so far; under another name then renamed, the newest three kept). A run started again resumes from
the newest one, as Horovod's own examples resume: rank 0 loads it, Horovod broadcasts the weights and the optimizer
to the other ranks before the first step, and the fit starts at the next epoch (`initial_epoch`).
"""
import json
import os

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf
from horovod.tensorflow import broadcast_variables

from digit_keras_net import digit_keras_net
from synthetic_digits import make_digits, training_arguments
from trainrun import checkpoint


class EpochCheckpoints(tf.keras.callbacks.Callback):
    """Rank 0's checkpoint at each epoch's end, named by the steps done: weights, optimizer state and losses."""

    def __init__(self, folder, steps_per_epoch, losses):
        super().__init__()
        self.folder, self.steps_per_epoch, self.losses = folder, steps_per_epoch, losses

    def on_epoch_end(self, epoch, logs=None):
        self.losses.append(float(logs["loss"]))
        with checkpoint.writing(self.folder, (epoch + 1) * self.steps_per_epoch) as written:
            self.model.save_weights(str(written / "model.weights.h5"))
            np.savez(written / "optimizer.npz", *[variable.numpy() for variable in self.model.optimizer.variables])
            (written / "losses.json").write_text(json.dumps(self.losses))


def resume(model, folder):
    """Rank 0 loads `folder`'s checkpoint into the model and its built optimizer; returns the losses it holds."""
    model.load_weights(str(folder / "model.weights.h5"))
    saved = np.load(folder / "optimizer.npz")
    for variable, name in zip(model.optimizer.variables, saved.files):
        variable.assign(saved[name])
    return json.loads((folder / "losses.json").read_text())


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
    resumed = checkpoint.latest(args.checkpoint_dir) if hvd.rank() == 0 else None
    first_epoch = int(hvd.broadcast(tf.constant(resumed.step // steps_per_epoch if resumed else 0), root_rank=0))
    losses = []
    if first_epoch:
        # Every rank builds its optimizer here, so that all name its variables alike for the broadcast.
        model.optimizer.build(model.trainable_variables)
        if resumed:
            losses = resume(model, resumed.path)
            print(resumed.message(), flush=True)
        # Horovod's callback broadcasts after the first step; a resumed run's ranks take that step from rank 0's state.
        broadcast_variables([*model.variables, *model.optimizer.variables], root_rank=0)
    # The metric average comes first, so that the checkpoint's losses are every rank's.
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()]
    if hvd.rank() == 0:
        callbacks.append(EpochCheckpoints(args.checkpoint_dir, steps_per_epoch, losses))
    model.fit(dataset, steps_per_epoch=steps_per_epoch, epochs=args.epochs, initial_epoch=first_epoch,
              callbacks=callbacks, verbose=2 if hvd.rank() == 0 else 0)
    model_file = os.path.join(args.checkpoint_dir, "model.weights.h5")
    if hvd.rank() == 0:
        model.save_weights(model_file)

    test_images, test_labels = make_digits(1000, seed=1)
    _, accuracy = model.evaluate(np.transpose(test_images, (0, 2, 3, 1)), test_labels, verbose=0)
    ranks_seen = int(hvd.allreduce(tf.constant(1.0), op=hvd.Sum).numpy())
    weights = np.concatenate([w.ravel() for w in model.get_weights()])
    every_rank = hvd.allgather(tf.constant(weights[None, :])).numpy()
    if hvd.rank() == 0:
        print(f"rank {hvd.rank()} wrote {model_file}", flush=True)
        print(json.dumps({"workflow": "horovod-keras", "keras": getattr(tf.keras, "__version__", "2 (tf_keras)"),
                          "ranks": ranks_seen, "losses": losses,
                          "accuracy": float(accuracy),
                          "same_weights_on_every_rank": bool((every_rank == every_rank[0]).all())}), flush=True)


if __name__ == "__main__":
    main()
