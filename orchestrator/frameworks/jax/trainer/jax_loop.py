"""Seed 000's MNIST MLP in JAX with orch's rules: one JAX process per container, met by ``jax.distributed``;
with one container the serial baseline, the same step with no other process.

- **The batch is the global batch.** The step is one jitted function over a global array of the whole batch,
  sharded across the processes' CPU devices (a mesh with one axis, ``workers``); the parameters and the optimiser's
  state are replicated. The loss is the mean over the global batch, so XLA all-reduces the gradients' sum across the
  processes (over gloo) and every process applies the same update: the serial run's, up to the order of sums.
- **Data is sharded once:** every epoch one permutation of the training split, the same on every process; global
  batch k is its k-th slice, and process r holds rows r, r + N, ... of it, so each sample of a batch is on exactly
  one process.
- **Per-worker figures are measured:** each process counts the samples it held and times its epochs.
- **Test accuracy comes from each process's own parameters** (its local copy of the replicated arrays), on the
  whole test split, with no collective.

Process 0 saves the parameters and the optimiser's state into the job's shared folder after every epoch; a restarted
group loads them and resumes. The coordinator's start-up and heartbeat timeouts are set a little beyond orch's own,
so orch names a missing or stalled process first.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

from . import contract, data
from .reporter import Reporter
from .mpi_wait import crowded
from .worker import leave, pin, result_of, weights_digest, write_predictions

CHECKPOINT_SUBDIR = "jax"
CHECKPOINT_FILE = "checkpoint.npz"
MLP_UNITS = (25, 15, 10)  # seed 000's MLP, as the TensorFlow and PyTorch trainers'
EVAL_CHUNK = 4096  # samples per evaluation call
TIMEOUT_MARGIN = 30  # seconds JAX waits beyond orch's own timeouts
AXIS = "workers"


def _model(nn: Any) -> Any:
    class MLP(nn.Module):  # flax's own, imported at run time (Any here)
        """Seed 000's MLP: 784 -> 25 -> 15 -> 10, ReLU."""

        @nn.compact
        def __call__(self, x: Any) -> Any:
            x = nn.relu(nn.Dense(MLP_UNITS[0])(x))
            x = nn.relu(nn.Dense(MLP_UNITS[1])(x))
            return nn.Dense(MLP_UNITS[2])(x)

    return MLP()


def _initialize(jax: Any, job: dict[str, Any], rank: int, world: int) -> None:
    """Meet the other processes at the coordinator (process 0), as the environment orch set names it."""
    named = (os.environ.get("JAX_PROCESS_ID"), os.environ.get("JAX_NUM_PROCESSES"))
    if named != (str(rank), str(world)):
        raise RuntimeError(f"JAX_PROCESS_ID/JAX_NUM_PROCESSES {named[0]}/{named[1]} do not match replica {rank} of "
                           f"{world}")
    jax.distributed.initialize(
        coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"], num_processes=world, process_id=rank,
        initialization_timeout=int(job["startup_timeout"]) + TIMEOUT_MARGIN,
        heartbeat_timeout_seconds=int(job["stall_timeout"]) + TIMEOUT_MARGIN)


def _save(path: str, leaves: list[Any], meta: dict[str, Any]) -> None:
    """The state's leaves and what the run needs to resume, whole or not at all."""
    arrays: dict[str, Any] = {f"leaf{i}": np.asarray(leaf) for i, leaf in enumerate(leaves)}
    arrays["meta"] = np.frombuffer(json.dumps(meta, allow_nan=False).encode(), np.uint8)
    with open(path + ".tmp", "wb") as f:
        np.savez(f, **arrays)
    os.replace(path + ".tmp", path)


def _load(path: str, count: int) -> tuple[list[np.ndarray], dict[str, Any]]:
    with np.load(path) as saved:
        meta = json.loads(saved["meta"].tobytes().decode())
        leaves = [saved[f"leaf{i}"] for i in range(count)]
    return leaves, meta


class _GlooGroup:
    """The run's collectives outside the step, through JAX's own (its coordinator and gloo)."""

    def __init__(self, multihost_utils: Any) -> None:
        self.utils = multihost_utils

    def sync(self, name: str) -> None:
        self.utils.sync_global_devices(name)

    def summed(self, values: np.ndarray) -> np.ndarray:
        gathered = np.asarray(self.utils.process_allgather(np.asarray(values)))
        return np.asarray(gathered.reshape(-1, len(values)).sum(0))

    def gathered(self, value: int) -> list[int]:
        return [int(v) for v in np.asarray(self.utils.process_allgather(np.array([value], np.int64))).ravel()]


def run(reporter: Reporter, job: dict[str, Any], rank: int, world: int, data_dir: str) -> None:
    """Train, write this process's result from its own parameters, wait for the others and leave (never returns)."""
    reporter.event(contract.EVENT_START, stage="importing")
    over_shm = world > 1 and job["transport"] == "shm"
    if over_shm:  # MPI first, as its ranks were started, before XLA's threads
        from .jax_mpi import MpiGroup, communicator

        comm, mpi = communicator(rank, world)
        group: Any = MpiGroup(comm, mpi, crowded(world, len(os.sched_getaffinity(0))))
    import jax
    import jax.numpy as jnp
    import optax
    from flax import linen as nn
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    # A process's own work comes before it meets the others and before it is pinned (see the PyTorch trainer).
    reporter.event(contract.EVENT_START, stage="loading")
    (x_tr, y_tr), (x_va, y_va), (x_te, y_te) = data.load(job["dataset"], data_dir, job["samples"], job["seed"])
    cpus = pin(os.environ.get(contract.ENV_CPUS))  # before XLA starts its threads: they inherit the share
    reporter.event(contract.EVENT_START, stage="connecting")
    if world > 1 and not over_shm:
        _initialize(jax, job, rank, world)
        group = _GlooGroup(multihost_utils)
    local = jax.local_devices()[0]
    mesh = Mesh(np.array(jax.devices()), (AXIS,))
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))

    def globally(tree: Any, sharding: Any) -> Any:
        """Each leaf of ``tree`` (this process's part) as one array across the processes."""
        return jax.tree.map(lambda leaf: jax.make_array_from_process_local_data(sharding, np.asarray(leaf)), tree)

    def own(tree: Any) -> Any:
        """This process's own copy of replicated arrays, as NumPy."""
        return jax.tree.map(lambda leaf: np.asarray(leaf.addressable_data(0)), tree)

    model = _model(nn)
    optimizer = optax.adam(job["learning_rate"])
    with jax.default_device(local):
        params = model.init(jax.random.PRNGKey(job["seed"]), jnp.zeros((1, 784), jnp.float32))
        opt_state = optimizer.init(params)
    state_leaves, treedef = jax.tree.flatten((params, opt_state))

    def train_step(params: Any, opt_state: Any, x: Any, y: Any) -> Any:
        def loss_of(p: Any) -> Any:
            logits = model.apply(p, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), logits

        (loss, logits), grads = jax.value_and_grad(loss_of, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, (logits.argmax(-1) == y).sum()

    step = (group.step(jax, optax, model, optimizer, params, job["global_batch"]) if over_shm else
            jax.jit(train_step, donate_argnums=(0, 1), out_shardings=(replicated,) * 4))
    logits_of = jax.jit(model.apply)

    def evaluate(p: Any, x: np.ndarray, y: np.ndarray) -> tuple[float, int, np.ndarray]:
        """(summed loss, correct, predictions) of this process's parameters ``p`` on (x, y), on its own device."""
        total, correct, guesses = 0.0, 0, []
        with jax.default_device(local):
            for first in range(0, len(x), EVAL_CHUNK):
                logits = np.asarray(logits_of(p, data.floats(x[first:first + EVAL_CHUNK])))
                labels = y[first:first + EVAL_CHUNK].astype(np.int32)
                shifted = logits - logits.max(-1, keepdims=True)
                total += float((np.log(np.exp(shifted).sum(-1)) - shifted[np.arange(len(labels)), labels]).sum())
                guesses.append(logits.argmax(-1))
                correct += int((guesses[-1] == labels).sum())
        return total, correct, np.concatenate(guesses) if guesses else np.zeros(0, np.int64)

    global_batch = job["global_batch"]
    per = global_batch // world
    steps = len(x_tr) // global_batch
    if steps < 1:
        raise RuntimeError(f"{len(x_tr)} train samples hold no global batch of {global_batch}")

    shared = os.path.join(reporter.out_dir, contract.CHECKPOINT_DIR, CHECKPOINT_SUBDIR)
    path = os.path.join(shared, CHECKPOINT_FILE)
    first, before, epochs_log = 0, 0.0, []
    if os.path.isfile(path):
        state_leaves, meta = _load(path, len(state_leaves))
        first, before, epochs_log = int(meta["epoch"]), float(meta["train_seconds"]), list(meta["epochs_log"])
    params, opt_state = globally(jax.tree.unflatten(treedef, state_leaves), replicated)
    if world > 1:
        seen = group.gathered(first)
        if len(set(seen)) != 1:  # e.g. a shared volume that showed one an older file
            raise RuntimeError(f"the processes restored different epochs ({sorted(set(seen))})")

    reporter.event(contract.EVENT_START, stage="training", steps_per_epoch=steps)
    how = "serial" if world == 1 else "gradients over MPI's shared memory" if over_shm else "SPMD over gloo"
    reporter.say(f"worker {rank}/{world}: {len(x_tr)} train samples, global batch {global_batch} ({per} per worker), "
                 f"{steps} steps per epoch, {how}, jax {jax.__version__}, "
                 f"{len(cpus)} cores")
    resumed_from = first + 1 if first < job["epochs"] else None
    if first and resumed_from:
        reporter.event(contract.EVENT_RESUMED, epoch=first + 1)
        reporter.say(f"worker {rank} resumed from a checkpoint at epoch {first + 1}")
    if world > 1:
        group.sync("orch: training starts")  # the clock starts when every process is ready
    started = time.perf_counter()
    beat = 0.0
    for epoch in range(first, job["epochs"]):
        began = time.perf_counter()
        order = np.random.default_rng([job["seed"], epoch]).permutation(len(x_tr))[:steps * global_batch]
        mine = order.reshape(steps, global_batch)[:, rank::world]  # this process's rows of each global batch
        losses, corrects = [], []
        for k in range(steps):
            x, y = data.floats(x_tr[mine[k]]), y_tr[mine[k]].astype(np.int32)
            if not over_shm:  # one global array of the batch, each process holding its rows
                x = jax.make_array_from_process_local_data(sharded, x, (global_batch, 784))
                y = jax.make_array_from_process_local_data(sharded, y, (global_batch,))
            params, opt_state, loss, correct = step(params, opt_state, x, y)
            losses.append(loss)
            corrects.append(correct)
            now = time.time()
            if now - beat >= 1.0:  # progress orch can see; a dead or paused peer stops it on every process
                beat = now
                reporter.heartbeat(now)
        jax.block_until_ready(params)
        trained = time.perf_counter() - began
        samples = steps * per
        mean_loss = float(np.mean([float(v.addressable_data(0)) for v in losses]))
        accuracy = sum(int(v.addressable_data(0)) for v in corrects) / (steps * global_batch)
        if over_shm:  # each process's figures are its rows' share of the global batch's
            mean_loss, accuracy = (float(v) for v in group.summed(np.array([mean_loss, accuracy])))
        validation_began = time.perf_counter()
        mine_params = own(params)
        val_loss, val_correct, _ = evaluate(mine_params, x_va[rank::world], y_va[rank::world])
        validation_seconds = time.perf_counter() - validation_began
        totals = np.array([val_loss, val_correct, len(y_va[rank::world])], np.float64)
        reduce_began = time.perf_counter()
        if world > 1:
            totals = group.summed(totals)
        reduction_seconds = time.perf_counter() - reduce_began
        record = {"epoch": epoch + 1, "seconds": 0.0, "samples": samples, "loss": mean_loss, "accuracy": accuracy,
                  "val_loss": float(totals[0] / max(totals[2], 1)), "val_accuracy": float(totals[1] / max(totals[2], 1)),
                  "steps": steps, "train_seconds": trained, "validation_seconds": validation_seconds,
                  "reduction_seconds": reduction_seconds, "checkpoint_seconds": 0.0}
        checkpoint_began = time.perf_counter()
        record["seconds"] = checkpoint_began - began  # the checkpointed copy: its own saving not yet counted
        if rank == 0:
            os.makedirs(shared, exist_ok=True)
            _save(path, jax.tree.leaves(own((params, opt_state))),
                  {"epoch": epoch + 1, "train_seconds": before + checkpoint_began - started,
                   "epochs_log": [*epochs_log, record]})
        if world > 1:
            group.sync(f"orch: epoch {epoch + 1} saved")  # none goes on before the save
        record = {**record, "seconds": time.perf_counter() - began,
                  "checkpoint_seconds": time.perf_counter() - checkpoint_began}
        epochs_log.append(record)
        reporter.event(contract.EVENT_EPOCH, epochs=job["epochs"], **record)
        reporter.say(f"worker {rank} epoch {epoch + 1}/{job['epochs']} loss {record['loss']:.4f} acc "
                     f"{record['accuracy']:.4f} val_acc {record['val_accuracy']:.4f} samples {samples} "
                     f"({record['seconds']:.2f} s)")
        reporter.heartbeat(time.time())
    train_seconds = before + time.perf_counter() - started

    final = own(params)
    _, test_correct, predictions = evaluate(final, x_te, y_te)
    test_accuracy = test_correct / max(len(y_te), 1)
    write_predictions(reporter, x_te, y_te, predictions)
    result = result_of(job, rank, world, per, steps, len(x_tr), len(x_te), epochs_log, resumed_from, train_seconds,
                       test_accuracy, cpus, jax=jax.__version__, backend="gloo" if world > 1 and not over_shm else None,
                       devices=jax.device_count(), transport=("shm" if over_shm else "gloo") if world > 1 else None,
                       allreduce_seconds=group.allreduce_seconds if over_shm else None,
                       allreduce_wait=("yield" if group.yielding else "poll") if over_shm else None,
                       weights_sha256=weights_digest(jax.tree.leaves(final)))
    leave(reporter, result, world)
