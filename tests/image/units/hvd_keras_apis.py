"""Horovod's Keras APIs beyond the fit recipe, on 2 ranks, under whichever Keras tf.keras is
(Keras 3 by default, Keras 2 with TF_USE_LEGACY_KERAS=1). Each check prints "ok <name>"; the
first failure raises. Variables are keyed by id(), which works for Keras 2 and Keras 3 variables
alike (Horovod's own tests key them by var.ref(), which Keras 3 variables lack)."""
import os
import shutil
import subprocess
import sys
import tempfile

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

hvd.init()
rank, size = hvd.rank(), hvd.size()
assert size == 2, size
KERAS = getattr(tf.keras, "__version__", "2")[0]


def ok(name: str) -> None:
    print(f"keras{KERAS} rank {rank} ok {name}", flush=True)


def same_on_every_rank(values) -> bool:
    flat = np.concatenate([np.ravel(v) for v in values])
    gathered = hvd.allgather(tf.constant(flat[None, :])).numpy()
    return bool(np.allclose(gathered[0], gathered[1]))


def sync_batch_normalization() -> None:
    """SyncBatchNormalization on each rank's row equals BatchNormalization over all ranks' rows."""
    batch = np.array([[[r, r + 1], [r * 2, r * 2 + 1], [r * 3, r * 3 + 1]] for r in range(size)], np.float32)
    reference = tf.keras.layers.BatchNormalization(axis=1)
    synced = hvd_tf.SyncBatchNormalization(axis=1)
    expected = reference(tf.constant(batch), training=True).numpy()
    got = synced(tf.constant(batch[rank:rank + 1]), training=True).numpy()
    np.testing.assert_allclose(got, expected[rank:rank + 1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(synced.moving_mean.numpy(), reference.moving_mean.numpy(), rtol=1e-5)
    np.testing.assert_allclose(synced.moving_variance.numpy(), reference.moving_variance.numpy(), rtol=1e-5)
    ok("sync_batch_normalization")


def model_on_rank() -> tf.keras.Model:
    initializer = tf.keras.initializers.Constant(rank)
    return tf.keras.Sequential([
        tf.keras.Input((3,)),
        tf.keras.layers.Dense(2, kernel_initializer=initializer, bias_initializer=initializer),
        tf.keras.layers.Dense(3, kernel_initializer=initializer, bias_initializer=initializer),
    ])


def partial_distributed_gradient_tape() -> None:
    """Gradients of local layers stay per-rank (scaled by 1/size, Horovod's default); the others
    are averaged over the ranks."""
    model = model_on_rank()
    x, y = np.full((1, 3), rank + 1.0, np.float32), np.ones((1, 3), np.float32)
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    plain = {id(v): g.numpy() for v, g in zip(model.trainable_weights, tape.gradient(loss, model.trainable_weights))}
    local_layer = model.layers[0]
    local_ids = {id(v) for v in local_layer.trainable_weights}
    partial = hvd_tf.PartialDistributedGradientTape(tape, local_layers=[local_layer])
    reduced = partial.gradient(loss, model.trainable_weights)
    for var, grad in zip(model.trainable_weights, reduced):
        if id(var) in local_ids:
            np.testing.assert_allclose(grad.numpy(), plain[id(var)] / size, rtol=1e-6)
        else:
            mean = hvd.allreduce(tf.constant(plain[id(var)]), op=hvd.Average).numpy()
            np.testing.assert_allclose(grad.numpy(), mean, rtol=1e-6)
    ok("partial_distributed_gradient_tape")


def broadcast_keras_variables() -> None:
    model = model_on_rank()
    hvd_tf.broadcast_variables(model.variables, root_rank=0)
    assert all(np.all(v.numpy() == 0) for v in model.variables), "rank 0's zeros did not arrive"
    ok("broadcast_variables")


def fit(optimizer_args: dict, epochs: int = 2, **distributed_args) -> tf.keras.Model:
    """The standard recipe on data that differs per rank; weights must agree at the end."""
    rng = np.random.default_rng(rank)
    ids = rng.integers(0, 50, size=(256, 4))
    labels = (ids.sum(axis=1) > 100).astype("int32")
    model = tf.keras.Sequential([tf.keras.Input((4,), dtype="int32"), tf.keras.layers.Embedding(50, 4),
                                 tf.keras.layers.Flatten(), tf.keras.layers.Dense(2)])
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(**optimizer_args), **distributed_args)
    model.compile(optimizer=optimizer, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback(),
                 hvd.callbacks.LearningRateWarmupCallback(initial_lr=optimizer_args["learning_rate"], warmup_epochs=1)]
    history = model.fit(ids, labels, batch_size=32, epochs=epochs, callbacks=callbacks, verbose=0)
    assert all(np.isfinite(history.history["loss"])), history.history
    assert same_on_every_rank(model.get_weights()), "weights differ between ranks"
    return model


def distributed_optimizer_options() -> None:
    fit({"learning_rate": 0.05}, sparse_as_dense=True)
    ok("sparse_as_dense")
    fit({"learning_rate": 0.05}, compression=hvd.Compression.fp16)
    ok("compression_fp16")
    fit({"learning_rate": 0.05}, backward_passes_per_step=2, average_aggregated_gradients=True, sparse_as_dense=True)
    ok("backward_passes_per_step")


def checkpoint_loads_on_one_process() -> None:
    """Rank 0 alone saves; a plain interpreter without Horovod loads the model and predicts the same,
    and hvd.load_model loads it with a DistributedOptimizer."""
    model = fit({"learning_rate": 0.05}, epochs=1)
    if rank == 0:
        directory = tempfile.mkdtemp()
        path = os.path.join(directory, "model.keras")
        probe = np.arange(8, dtype="int32").reshape(2, 4)
        model.save(path)
        np.save(os.path.join(directory, "expected.npy"), model.predict(probe, verbose=0))
        load = ("import sys, numpy as np, tensorflow as tf; d = sys.argv[1];"
                " m = tf.keras.models.load_model(sys.argv[2], compile=False);"
                " np.testing.assert_allclose(m.predict(np.arange(8, dtype='int32').reshape(2, 4), verbose=0),"
                " np.load(d + '/expected.npy'), rtol=1e-6)")
        subprocess.run([sys.executable, "-c", load, directory, path], check=True,
                       env={k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "HOROVOD_"))})
        resumed = hvd.load_model(path)  # to train on: the optimizer comes back wrapped
        assert hasattr(resumed.optimizer, "_allreduce"), type(resumed.optimizer).__mro__
        shutil.rmtree(directory)
    hvd_tf.broadcast(tf.constant(0), root_rank=0, name="checkpoint_written")  # a barrier
    ok("checkpoint")


def elastic_keras_state() -> None:
    model = model_on_rank()
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=0.1)), loss="mse")
    model.fit(np.ones((4, 3), np.float32), np.ones((4, 3), np.float32), verbose=0)
    state = hvd.elastic.KerasState(model, batch=rank + 5, epoch=rank)
    state.sync()
    assert (state.batch, state.epoch) == (5, 0), (state.batch, state.epoch)
    assert same_on_every_rank(model.get_weights()), "weights differ after KerasState.sync"
    state.commit()
    for var in model.variables:
        var.assign(var + 1.0)
    state.restore()
    assert same_on_every_rank(model.get_weights()), "weights differ after KerasState.restore"
    ok("elastic_keras_state")


sync_batch_normalization()
partial_distributed_gradient_tape()
broadcast_keras_variables()
distributed_optimizer_options()
checkpoint_loads_on_one_process()
elastic_keras_state()
print(f"keras{KERAS} rank {rank} all ok", flush=True)
