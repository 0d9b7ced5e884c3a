"""A plain JAX data-parallel script, as JAX's multi-process guide writes one, plus orch's report helper for its figures.

orch runs it one process per container: `orch up --framework jax --workers 2 --script examples/jax_data_parallel.py
-- --epochs 3`. It calls `jax.distributed.initialize()` with no arguments, which finds the job in the environment
orch sets (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID, as Kubeflow Trainer's JAX runtime sets them),
holds its own share of each global batch of a synthetic data set, lets XLA all-reduce the gradients (over gloo on
CPUs), and reports each epoch and its test accuracy (from its own copy of the parameters) with orch_trainer.report.
"""
import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from orch_trainer import report

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=64, help="the global batch, split among the processes")
args = parser.parse_args()

if "JAX_COORDINATOR_ADDRESS" in os.environ:
    jax.distributed.initialize()
rank, world = jax.process_index(), jax.process_count()

rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 20)).astype(np.float32)
y = (x[:, :10].sum(1) > x[:, 10:].sum(1)).astype(np.int32)  # a rule the model can learn
x_train, y_train, x_test, y_test = x[:3072], y[:3072], x[3072:], y[3072:]

mesh = Mesh(np.array(jax.devices()), ("batch",))
replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
params = {"w1": rng.normal(size=(20, 32)).astype(np.float32) * 0.3, "b1": np.zeros(32, np.float32),
          "w2": rng.normal(size=(32, 2)).astype(np.float32) * 0.3, "b2": np.zeros(2, np.float32)}
params = jax.tree.map(lambda a: jax.make_array_from_process_local_data(replicated, a), params)


def logits(p, xb):
    return jax.nn.relu(xb @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def loss_of(p, xb, yb):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits(p, xb)), yb[:, None], axis=1))


@jax.jit
def step(p, xb, yb):
    loss, grads = jax.value_and_grad(loss_of)(p, xb, yb)
    return jax.tree.map(lambda w, g: w - 0.1 * g, p, grads), loss


steps = len(x_train) // args.batch_size
report.started(steps_per_epoch=steps)
began = time.perf_counter()
for epoch in range(args.epochs):
    order = np.random.default_rng(epoch).permutation(len(x_train))
    started, seen = time.perf_counter(), 0
    for k in range(steps):
        rows = order[k * args.batch_size:(k + 1) * args.batch_size][rank::world]  # this process's share
        xb = jax.make_array_from_process_local_data(sharded, x_train[rows], (args.batch_size, 20))
        yb = jax.make_array_from_process_local_data(sharded, y_train[rows], (args.batch_size,))
        params, loss = step(params, xb, yb)
        seen += len(rows)
        report.heartbeat()
    report.epoch(epoch + 1, samples=seen, seconds=time.perf_counter() - started, epochs=args.epochs,
                 loss=float(loss.addressable_data(0)))
own = jax.tree.map(lambda a: np.asarray(a.addressable_data(0)), params)  # this process's copy
accuracy = float((np.asarray(logits(own, x_test)).argmax(1) == y_test).mean())
print(f"process {rank} of {world}: test accuracy {accuracy:.4f}", flush=True)
report.result(test_accuracy=accuracy, train_seconds=time.perf_counter() - began)
