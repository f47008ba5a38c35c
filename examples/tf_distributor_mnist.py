"""TensorFlow on Spark as spark-tensorflow-distributor runs it (Databricks Runtime ML):
`MirroredStrategyRunner(num_slots=2, use_gpu=False).run(train_fn, **kwargs)`.

    python tf_distributor_mnist.py [--master URL] [--checkpoint-dir DIR]

One barrier task per slot; the runner sets TF_CONFIG in each, builds a MultiWorkerMirroredStrategy
and calls train_fn inside its scope, so the model and optimizer are created there. Imports sit
inside train_fn, as the distributor's users are told. Keras' own BackupAndRestore callback, made for this strategy,
backs the training up at each epoch's end in --checkpoint-dir's `backup` (a folder every worker sees); a run started
again restores the newest backup and goes on from the epoch after it, and worker 0 says so in one line. Worker 0
(the chief) alone writes the final weights; the runner returns the chief's result.
"""
import argparse
import json
import os

from pyspark.sql import SparkSession
from spark_tensorflow_distributor import MirroredStrategyRunner

HERE = os.path.dirname(os.path.abspath(__file__))


def train_fn(lr: float, epochs: int, batch_size: int, checkpoint_dir: str) -> dict:
    import json
    import os

    import numpy as np
    import tensorflow as tf

    from digit_keras_net import digit_keras_net
    from synthetic_digits import make_digits

    worker = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    strategy = tf.distribute.get_strategy()
    workers = strategy.num_replicas_in_sync
    tf.random.set_seed(42)

    images, labels = make_digits(3000, seed=0)
    images = np.transpose(images, (0, 2, 3, 1))
    # Each worker reads its own shard. The dataset's batch is the global one: the strategy gives
    # each worker batch_size of it.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset = (tf.data.Dataset.from_tensor_slices((images, labels)).shard(workers, worker)
               .shuffle(1024, seed=worker).repeat().batch(batch_size * workers).with_options(options))
    steps_per_epoch = len(labels) // workers // batch_size

    model = digit_keras_net()
    model.compile(optimizer=tf.keras.optimizers.SGD(lr * workers, momentum=0.9), metrics=["accuracy"],
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    backup_dir = os.path.join(checkpoint_dir, "backup")
    losses_file = os.path.join(checkpoint_dir, "epoch_losses.json")

    class EpochLosses(tf.keras.callbacks.Callback):
        """The loss of every epoch, kept beside the backup (ahead of it: a backup never has a loss missing), and the
        line a resumed run prints. The history of a resumed fit starts at its first epoch."""

        def __init__(self):
            super().__init__()
            self.losses, self.first_epoch = {}, None

        def on_epoch_begin(self, epoch, logs=None):
            if self.first_epoch is None:
                self.first_epoch = epoch
                if epoch and os.path.isfile(losses_file):
                    with open(losses_file) as saved:
                        self.losses = {int(k): v for k, v in json.load(saved).items() if int(k) < epoch}
                if epoch and worker == 0:
                    print(f"resumed from step {epoch * steps_per_epoch} ({backup_dir})", flush=True)

        def on_epoch_end(self, epoch, logs=None):
            self.losses[epoch] = float(logs["loss"])
            if worker == 0:
                os.makedirs(checkpoint_dir, exist_ok=True)
                with open(losses_file + ".partial", "w") as partial:
                    json.dump(self.losses, partial)
                os.replace(losses_file + ".partial", losses_file)

    epoch_losses = EpochLosses()
    backup = tf.keras.callbacks.BackupAndRestore(backup_dir, delete_checkpoint=False)
    model.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, verbose=2 if worker == 0 else 0,
              callbacks=[epoch_losses, backup])

    test_images, test_labels = make_digits(1000, seed=1)
    logits = model(np.transpose(test_images, (0, 2, 3, 1)), training=False).numpy()  # local, no collectives
    accuracy = float(np.mean(np.argmax(logits, axis=1) == test_labels))
    # A cross-worker sum: it completes only when every worker takes part.
    ranks = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.constant(1.0)), axis=None)
    result = {"worker": worker, "ranks": int(ranks.numpy()),
              "losses": [epoch_losses.losses[epoch] for epoch in sorted(epoch_losses.losses)], "accuracy": accuracy}
    if worker == 0:
        os.makedirs(checkpoint_dir, exist_ok=True)
        path = os.path.join(checkpoint_dir, "tf_distributor.weights.npz")
        np.savez(path, *model.get_weights())
        result["checkpoint"] = path
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", default=os.environ.get("MASTER", "local[2]"),
                        help="Spark master (default: $MASTER, which spark-submit reads too, else local[2])")
    parser.add_argument("--checkpoint-dir", default="/tmp/checkpoints")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    # Keras 3 (TF >= 2.16's default) fails in model.fit under MultiWorkerMirroredStrategy
    # ("Attempt to convert a value (PerReplica...)"); the Keras 2 that this distributor's users
    # wrote their code for is tf_keras, which tf.keras resolves to when TF_USE_LEGACY_KERAS=1 is
    # set before TensorFlow is imported in the executors' Python workers.
    spark = (SparkSession.builder.master(args.master).appName("tf-distributor-example")
             .config("spark.executorEnv.TF_USE_LEGACY_KERAS", "1").getOrCreate())
    for module in ("digit_keras_net.py", "synthetic_digits.py"):
        spark.sparkContext.addPyFile(os.path.join(HERE, module))
    result = MirroredStrategyRunner(num_slots=2, use_gpu=False).run(
        train_fn, lr=0.02, epochs=args.epochs, batch_size=32, checkpoint_dir=args.checkpoint_dir)
    print(f"rank {result['worker']} wrote {result['checkpoint']}", flush=True)
    print(json.dumps({"workflow": "tf-distributor", **result}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
