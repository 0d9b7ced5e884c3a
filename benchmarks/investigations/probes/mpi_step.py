"""Runs inside a trainer container, pinned to one core: the cost of one step of orch's MPI loop with no MPI.

Usage (one core, as a rank sharing a core with nothing):
  docker run --rm --network none --cpuset-cpus 0 -v "$PWD/benchmarks/investigations/probes/mpi_step.py:/p.py:ro" \\
      --entrypoint python3 orch-trainer:0.1.0-multi /p.py

The MLP's step as mpi_loop.py runs it (gather the batch, forward, backward, the flat gradients through a NumPy
function where the Allreduce would be, Adam), K steps to one tf.function call, at a rank's batch of 32 (3 ranks,
global batch 96), 48 (2 ranks) and 96 (1 rank). With 3 ranks on 2 cores two ranks share a core, so a step there
costs at least twice the batch-32 figure, against the batch-96 figure for one rank: the floor of T(3)/T(1).

Each is timed twice: with the NumPy function (a rank of several) and without it, the gradients staying in the
graph (one rank alone, as the floor's solo rank runs): the difference is what leaving the graph for the
Allreduce costs a step, before any peer.
"""
import os
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

STEPS = 2000

inputs = keras.Input(shape=(784,))
hidden = keras.layers.Dense(15, activation="relu")(keras.layers.Dense(25, activation="relu")(inputs))
net = keras.Model(inputs, keras.layers.Dense(10)(hidden))
optimizer = keras.optimizers.Adam(1e-3)
variables = net.trainable_variables
optimizer.build(variables)
sizes = [int(np.prod(v.shape)) for v in variables]
shapes = [tuple(v.shape) for v in variables]
per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)


def copy(flat: np.ndarray) -> np.ndarray:
    """Where the Allreduce would be: the same copy into a new buffer, and no peer."""
    out = np.empty_like(flat)
    out[:] = flat
    return out


for batch in (32, 48, 96):
    x_all = tf.constant(np.random.rand(batch * STEPS, 784).astype(np.float32))
    y_all = tf.constant(np.random.randint(0, 10, batch * STEPS).astype(np.int64))
    loss_sum = tf.Variable(0.0)
    for per_call, leave in ((1, True), (10, True), (50, True), (50, False)):
        @tf.function
        def steps(batches):
            for k in tf.range(tf.shape(batches)[0]):
                x, y = tf.gather(x_all, batches[k]), tf.gather(y_all, batches[k])
                with tf.GradientTape() as tape:
                    losses = per_example(y, net(x, training=True))
                    loss = tf.reduce_sum(losses) / 96.0
                flat = tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(loss, variables)], 0)
                if leave:
                    flat = tf.numpy_function(copy, [flat], tf.float32, stateful=True)
                grads = [tf.reshape(g, s) for g, s in zip(tf.split(flat, sizes), shapes)]
                optimizer.apply_gradients(zip(grads, variables))
                loss_sum.assign_add(tf.reduce_sum(losses))

        order = np.random.permutation(batch * STEPS).reshape(STEPS, batch)
        for repeat in range(2):  # the first pays the tracing
            started = time.perf_counter()
            for first in range(0, STEPS, per_call):
                steps(tf.constant(order[first:first + per_call]))
            ms = (time.perf_counter() - started) / STEPS * 1e3
            print(f"batch {batch}, {per_call} steps a call, {'through NumPy' if leave else 'in the graph'}, "
                  f"pass {repeat + 1}: {ms:.3f} ms a step", flush=True)
