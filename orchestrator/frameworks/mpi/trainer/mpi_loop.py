"""Seed 001's mpi4py strategy: TensorFlow computes each rank's gradients, MPI's Allreduce sums them over the
ranks, and every rank applies the same update to its own copy of the model.

One rank per container (``mpi_launch.py`` starts them). Every epoch has one order of the training split, the same
on every rank, and each global batch in it is split among the ranks: each sample is trained on once an epoch, by one
rank, at ``global batch / size`` samples per rank and step, and the global batches are those one process would
draw, so 1 and N ranks make the same updates (up to the order of floating-point sums). The
loss is summed over the rank's samples and divided by the global batch: the sum over ranks is then the global
mean's gradient, the same update one process would make on the whole batch. Rank 0's initial weights are
broadcast, so every rank starts, and stays, identical; each computes its test accuracy from its own weights.
Metrics are summed over the ranks once per epoch. Rank 0 checkpoints (tf.train.Checkpoint) into the shared
folder after every epoch, and a restarted group resumes from it.

With one worker there is no MPI at all (no mpiexec, no mpi4py): the same loop, the baseline.
"""
from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from . import contract
from .mpi_wait import crowded
from .session import Session, floats

CHECKPOINT_SUBDIR = "mpi"
# The all-reduce inside the graph, a TensorFlow op of orch's compiled into the image (the TensorFlow recipe's
# ops/mpi_allreduce.cc and Dockerfile, which puts it here).
ALLREDUCE_OP = "/opt/venv/lib/orch-ops/mpi_allreduce.so"
CHUNK = 50  # training steps per tf.function call
VALIDATION_CHUNK = 1024  # samples per validation call: a CNN's activations of a whole split would not fit
QUIET_POLL_S = 0.002  # how often a rank waiting in ``meet`` tests whether the others have come


class _Alone:
    """What the loop asks of a communicator, for a job of one rank."""

    rank, size = 0, 1

    def Allreduce(self, _in_place: Any, buffer: Any) -> None:  # noqa: N802 - mpi4py's name
        pass

    def allreduce(self, value: Any) -> Any:
        return value

    def Bcast(self, buffer: Any, root: int = 0) -> None:  # noqa: N802
        pass

    def Barrier(self) -> None:  # noqa: N802
        pass


def communicator(num_workers: int) -> tuple[Any, Any]:
    """MPI's world communicator, or a stand-in for a single worker; the rank must be this replica's index."""
    if num_workers == 1:
        return _Alone(), None
    from mpi4py import MPI

    return MPI.COMM_WORLD, MPI


def meet(comm: Any) -> None:
    """Wait until every rank is here without holding a core: a non-blocking barrier, tested every QUIET_POLL_S.

    For the waits outside the steps, where a rank can be early by seconds (the start, each epoch's end, the
    last): MPICH's blocking calls poll, so an early rank takes the core a slower neighbour needs for its import,
    data or checkpoint. Each step's all-reduce stays blocking: there the ranks arrive within a step of each
    other, and sleeping between tests cost more than it saved (benchmarks/investigations/mpi_wait.py)."""
    if comm.size == 1:
        return
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(QUIET_POLL_S)


def allreduce_op(tf: Any) -> Any:
    """The gradients' sum over the ranks inside the graph, and the seconds the call took: the all-reduce with any
    wait for a rank still computing, measured by each rank, not assumed. MPI must be initialised first (mpi4py is).

    It blocks in MPI_Allreduce, which MPICH polls, as mpi4py's call did when the gradients left the graph for it
    through tf.numpy_function: leaving cost 0.16-0.24 ms of a 0.28-0.37 ms step
    (benchmarks/investigations/results/mpi_step.md). Told to yield (``yielding``, ORCH_MPI_WAIT=yield), it starts
    MPI_Iallreduce and gives up the core between tests of it, which measured no better."""
    return tf.load_op_library(ALLREDUCE_OP).orch_mpi_allreduce


def train_with_mpi(s: Session, comm: Any, mpi: Any, cores: int) -> None:
    """Train with the MPI loop; write the result from this rank's own weights (never returns)."""
    tf, keras, job, reporter = s.tf, s.keras, s.job, s.reporter
    if comm.size != s.num_workers or comm.rank != s.worker:
        raise RuntimeError(f"MPI placed rank {comm.rank} of {comm.size} in replica {s.worker} of {s.num_workers}")
    inputs, logits = s.models.architecture(job["model"], keras, s.train[0], s.vocabulary)
    net = keras.Model(inputs, logits)
    optimizer = keras.optimizers.Adam(learning_rate=job["learning_rate"])
    per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)
    variables = net.trainable_variables
    shapes = [tuple(v.shape) for v in variables]
    sizes = [int(np.prod(shape)) for shape in shapes]
    optimizer.build(variables)

    weights = np.concatenate([v.numpy().ravel() for v in variables]).astype(np.float32)
    meet(comm)  # the slowest rank may still be importing TensorFlow: wait for it without taking its core
    comm.Bcast(weights, root=0)  # one starting point for every rank
    for v, part, shape in zip(variables, np.split(weights, np.cumsum(sizes)[:-1]), shapes):
        v.assign(part.reshape(shape))

    epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=net, optimizer=optimizer, epoch=epoch)
    shared = os.path.join(reporter.out_dir, contract.CHECKPOINT_DIR, CHECKPOINT_SUBDIR)
    latest = tf.train.latest_checkpoint(shared)
    if latest:
        checkpoint.restore(latest)  # every rank reads the same file: they stay identical
    first = comm.bcast(int(epoch.numpy()), root=0) if comm.size > 1 else int(epoch.numpy())
    if first != int(epoch.numpy()):  # e.g. a shared volume that showed this rank an older checkpoint
        raise RuntimeError(f"rank {comm.rank} restored epoch {int(epoch.numpy())}, rank 0 epoch {first}")
    manager = tf.train.CheckpointManager(checkpoint, shared, max_to_keep=1) if comm.rank == 0 else None

    global_batch = float(s.global_batch)
    x_tr, y_tr = tf.constant(s.train[0]), tf.constant(s.train[1].astype(np.int64))
    x_va, y_va = (tf.constant(a[comm.rank::comm.size]) for a in (s.validation[0], s.validation[1].astype(np.int64)))
    totals = tf.Variable(tf.zeros([6], tf.float64), trainable=False)  # train loss, correct, samples; validation's
    allreduce = allreduce_op(tf) if comm.size > 1 else None
    # The op waits in MPICH's polling wait at every N: yielding between tests of a non-blocking all-reduce measured
    # no better at 3 to 16 ranks on 2 cores (benchmarks/investigations/transport.md); ORCH_MPI_WAIT=yield asks for it.
    yielding = crowded(comm.size, cores) and os.environ.get("ORCH_MPI_WAIT") == "yield"
    allreduce_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False)  # this rank's, over the run

    def correct_of(out: Any, y: Any) -> Any:
        return tf.reduce_sum(tf.cast(tf.equal(tf.argmax(out, 1, output_type=y.dtype), y), tf.float64))

    @tf.function
    def train_steps(batches: Any) -> None:
        # Many steps to one call, as Keras' steps_per_execution: Python's dispatch is paid once per call. The
        # gradients never leave the graph: MPI's Allreduce is an op in it, in step order.
        for k in tf.range(tf.shape(batches)[0]):
            x, y = floats(tf, tf.gather(x_tr, batches[k])), tf.gather(y_tr, batches[k])
            with tf.GradientTape() as tape:
                out = net(x, training=True)
                losses = per_example(y, out)
                loss = tf.reduce_sum(losses) / global_batch
            flat = tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(loss, variables)], 0)
            if allreduce is not None:
                flat, seconds = allreduce(flat, yielding=yielding)
                allreduce_seconds.assign_add(seconds)
            grads = [tf.reshape(g, shape) for g, shape in zip(tf.split(flat, sizes), shapes)]
            optimizer.apply_gradients(zip(grads, variables))
            totals.assign_add(tf.stack([tf.cast(tf.reduce_sum(losses), tf.float64), correct_of(out, y),
                                        tf.cast(tf.shape(y)[0], tf.float64), 0.0, 0.0, 0.0]))

    @tf.function
    def validate(x: Any, y: Any) -> None:
        out = net(floats(tf, x), training=False)
        totals.assign_add(tf.stack([0.0, 0.0, 0.0, tf.cast(tf.reduce_sum(per_example(y, out)), tf.float64),
                                    correct_of(out, y), tf.cast(tf.shape(y)[0], tf.float64)]))

    chunk = CHUNK
    s.announce()
    comm.Barrier()  # the clock starts when every rank is ready, as MultiWorkerMirroredStrategy's does once connected
    started = time.perf_counter()
    beat = 0.0
    for e in range(int(epoch.numpy()), job["epochs"]):
        s.resumed(e + 1)
        began = time.perf_counter()
        totals.assign(tf.zeros([6], tf.float64))
        # One order of the whole training split, the same on every rank; each global batch in it is split
        # among the ranks. So every sample is trained on once an epoch, by one rank, and the global batches
        # are those of one process: 1 and N ranks make the same updates, up to the order of the sums.
        order = np.random.default_rng(job["seed"] + e).permutation(int(x_tr.shape[0]))
        steps = s.steps_per_epoch
        batches = order[:steps * s.global_batch].reshape(steps, s.global_batch)[:, comm.rank::comm.size]
        waited = float(allreduce_seconds.numpy())
        for first in range(0, s.steps_per_epoch, chunk):
            train_steps(tf.constant(batches[first:first + chunk]))
            now = time.time()
            if now - beat >= 1.0:  # progress the orchestrator can see; a dead peer stops it on every rank
                beat = now
                reporter.heartbeat(now)
        trained = time.perf_counter() - began
        waited = float(allreduce_seconds.numpy()) - waited  # this epoch's: the blocking call hides nothing
        for rows in range(0, int(x_va.shape[0]), VALIDATION_CHUNK):  # the whole share, in bounded pieces
            validate(x_va[rows:rows + VALIDATION_CHUNK], y_va[rows:rows + VALIDATION_CHUNK])
        mine = totals.numpy()
        summed = mine.copy()
        if comm.size > 1:
            comm.Allreduce(mpi.IN_PLACE, summed, op=mpi.SUM)
        checkpoint_began = time.perf_counter()
        epoch.assign(e + 1)
        if manager is not None:
            manager.save()
        meet(comm)  # no rank starts the next epoch, or ends, before rank 0's checkpoint of this one
        # The epoch is reported once it is checkpointed; its seconds hold the checkpoint and the wait for it.
        s.epoch_done({"epoch": e + 1, "seconds": time.perf_counter() - began, "samples": int(mine[2]),
                      "loss": summed[0] / max(summed[2], 1), "accuracy": summed[1] / max(summed[2], 1),
                      "val_loss": summed[3] / max(summed[5], 1), "val_accuracy": summed[4] / max(summed[5], 1),
                      "compute_seconds": trained - waited, "allreduce_wait_seconds": waited,
                      "allreduce_in_flight_seconds": waited,
                      "checkpoint_seconds": time.perf_counter() - checkpoint_began})

    def leave() -> None:
        meet(comm)  # every rank has written its result
        if mpi is not None:
            mpi.Finalize()

    version = None if mpi is None else mpi.Get_library_version().splitlines()[0][:200]
    s.finish(net, started, extra={"replicas": comm.size, "allreduce_wait": "yield" if yielding else "poll",
                                  "mpi": version}, wait=leave)
