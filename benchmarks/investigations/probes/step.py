"""Runs inside a trainer container: the cost of one training step, bare and in Keras' fit() machinery.

All run the MLP at the same per-worker batch, 50 steps to a tf.function call, under
MultiWorkerMirroredStrategy:
  bare:  forward, backward, one all-reduce of the gradients, Adam (a custom loop);
  keras: the same model compiled as orch's trainer compiles it, with Keras' own steps
         (and once more without the accuracy metric);
  orch:  the trainer's own model (orch_trainer.model.build), whose steps read no metric across workers.
The last three are stepped by Keras' train_function. Two more split the bare step in place, in the same
containers with the same neighbours on their cores:
  compute: the bare step without its all-reduce (each worker applies its own gradients);
  reduce:  the all-reduce of the gradients' tensors alone, as the optimizer issues it, 50 in a row.
Printed: ms per step of each, after one call to trace and connect. PROBE_GLOBAL sets the global batch (96).
"""
import json
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402
from orch_trainer.model import build as build_model  # noqa: E402  (the image's trainer)

workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
options = tf.distribute.experimental.CommunicationOptions(
    bytes_per_pack=32 << 20, implementation=tf.distribute.experimental.CommunicationImplementation.RING)
strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
GLOBAL, PER_CALL, CALLS = int(os.environ.get("PROBE_GLOBAL", "96")), 50, int(os.environ.get("PROBE_CALLS", "8"))
rng = np.random.default_rng(0)
x = rng.random((GLOBAL // workers * 64, 784), dtype=np.float32)
y = rng.integers(0, 10, len(x))


def dataset(_ctx=None):
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL // workers, drop_remainder=True).repeat()


with strategy.scope():
    def build():
        inputs = keras.Input(shape=(784,))
        h = keras.layers.Dense(25, activation="relu")(inputs)
        h = keras.layers.Dense(15, activation="relu")(h)
        return keras.Model(inputs, keras.layers.Dense(10)(h))
    bare_model = build()
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def compiled(metrics, model=None):
        model = model or build()
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=metrics,
                      steps_per_execution=PER_CALL)
        model.distribute_reduction_method = "first"
        return model
    keras_model, keras_no_metrics = compiled(["accuracy"]), compiled([])
    orch_model = compiled(["accuracy"], build_model("mlp", keras, tf, x[:1]))  # the trainer's model and steps

iterator = iter(strategy.distribute_datasets_from_function(dataset))


def custom_loop(all_reduce: bool):
    """50 custom steps in one tf.function: with ``all_reduce``, the bare step; without, its compute alone."""
    @tf.function
    def steps():
        def step(batch):
            bx, by = batch
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(by, bare_model(bx, training=True)),
                                                  global_batch_size=GLOBAL)
            optimizer.apply_gradients(zip(tape.gradient(loss, bare_model.trainable_variables),
                                          bare_model.trainable_variables), skip_gradients_aggregation=not all_reduce)
            return loss
        for _ in tf.range(PER_CALL):
            strategy.run(step, args=(next(iterator),))
    return steps


bare_steps, compute_steps = custom_loop(True), custom_loop(False)


gradients = [tf.ones_like(v) for v in bare_model.trainable_variables]


@tf.function
def reduce_steps():
    def body(i, acc):  # each all-reduce's input depends on the last one's result, so they run in turn
        reduced = strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(
            "sum", [g + acc for g in gradients]))
        return i + 1, strategy.experimental_local_results(reduced[-1])[0][0] * 0.0
    return tf.while_loop(lambda i, _: i < PER_CALL, body, (tf.constant(0), tf.constant(0.0)))[1]


def timed(fn) -> float:
    fn()  # trace and connect
    started = time.perf_counter()
    for _ in range(CALLS):
        fn()
    return (time.perf_counter() - started) / (CALLS * PER_CALL) * 1000


def keras_steps(model):
    it = iter(strategy.distribute_datasets_from_function(dataset))
    train_function = model.make_train_function()
    return timed(lambda: train_function(it))


print(json.dumps({"workers": workers, "global_batch": GLOBAL, "bare_ms_per_step": timed(bare_steps),
                  "compute_ms_per_step": timed(compute_steps), "reduce_ms_per_step": timed(reduce_steps),
                  "keras_ms_per_step": keras_steps(keras_model),
                  "keras_no_metrics_ms_per_step": keras_steps(keras_no_metrics),
                  "orch_ms_per_step": keras_steps(orch_model)}), flush=True)
