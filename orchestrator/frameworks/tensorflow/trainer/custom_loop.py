"""Seed 001's custom data parallelism: MultiWorkerMirroredStrategy with orch's own training loop.

``strategy.run`` computes each replica's gradients; one explicit all-reduce sums them across workers; every
worker applies the same update. Metrics are orch's own and read across workers once per epoch, and the
loop checkpoints itself (tf.train.Checkpoint) into the shared folder, so a restarted group resumes. It is
a second measurement of what Keras' fit() costs per step.
"""
from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from . import contract
from .session import Session

CHECKPOINT_SUBDIR = "custom"


def train_with_custom_loop(s: Session) -> None:
    """Train with the custom loop; write the result from this worker's own weights (never returns)."""
    tf, keras, job, strategy, reporter = s.tf, s.keras, s.job, s.strategy, s.reporter
    with strategy.scope():
        net = s.models.build(job["model"], keras, tf, s.train[0], s.vocabulary)
        optimizer = keras.optimizers.Adam(learning_rate=job["learning_rate"])
        per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                 reduction=keras.losses.Reduction.NONE)
        metrics = {name: (keras.metrics.Mean(), keras.metrics.SparseCategoricalAccuracy()) for name in ("", "val_")}
        samples = tf.Variable(0, dtype=tf.int64, trainable=False, synchronization=tf.VariableSynchronization.ON_READ,
                              aggregation=tf.VariableAggregation.SUM)
    epoch = tf.Variable(0, dtype=tf.int64, trainable=False)  # outside the scope: each worker's own counter
    checkpoint = tf.train.Checkpoint(model=net, optimizer=optimizer, epoch=epoch)
    shared = os.path.join(reporter.out_dir, contract.CHECKPOINT_DIR, CHECKPOINT_SUBDIR)
    # Every worker saves (the variables are read on each); only worker 0's copy is kept where all can read it.
    own = shared if s.worker == 0 else tempfile.mkdtemp(prefix=f"orch-checkpoint-{s.worker}-")
    manager = tf.train.CheckpointManager(checkpoint, own, max_to_keep=1)
    latest = tf.train.latest_checkpoint(shared)
    if latest:
        checkpoint.restore(latest)

    def train_step(x: Any, y: Any) -> None:
        with tf.GradientTape() as tape:
            logits = net(x, training=True)
            losses = per_example(y, logits)
            loss = tf.nn.compute_average_loss(losses, global_batch_size=s.global_batch)
        grads = tape.gradient(loss, net.trainable_variables)
        # The explicit gradient all-reduce: a sum over every replica of every worker.
        grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
        optimizer.apply_gradients(zip(grads, net.trainable_variables), skip_gradients_aggregation=True)
        metrics[""][0].update_state(losses)
        metrics[""][1].update_state(y, logits)
        samples.assign_add(tf.cast(tf.shape(x)[0], tf.int64))

    def test_step(x: Any, y: Any) -> None:
        logits = net(x, training=False)
        metrics["val_"][0].update_state(per_example(y, logits))
        metrics["val_"][1].update_state(y, logits)

    @tf.function
    def run_steps(iterator: Any, steps: Any, step_fn: Any) -> None:
        for _ in tf.range(steps):
            strategy.run(step_fn, args=next(iterator))

    def loop(iterator: Any, total: int, step_fn: Any) -> None:
        beat, chunk = 0.0, job["steps_per_execution"]
        for first in range(0, total, chunk):
            run_steps(iterator, tf.constant(min(chunk, total - first)), step_fn)
            now = time.time()
            if now - beat >= 1.0:  # progress the orchestrator can see
                beat = now
                reporter.heartbeat(now)

    train_it = iter(strategy.distribute_datasets_from_function(s.input_fn(*s.train, shuffle=True)))
    val_it = iter(strategy.distribute_datasets_from_function(s.input_fn(*s.validation, shuffle=False)))
    s.announce()
    started = time.perf_counter()
    for e in range(int(epoch.numpy()), job["epochs"]):
        s.resumed(e + 1)
        began = time.perf_counter()
        for pair in metrics.values():
            for m in pair:
                m.reset_state()
        loop(train_it, s.steps_per_epoch, train_step)
        loop(val_it, s.val_steps, test_step)
        # Read across workers (an all-reduce per variable), in the same order on every worker.
        record = {f"{prefix}{name}": float(m.result()) for prefix, pair in metrics.items()
                  for name, m in zip(("loss", "accuracy"), pair)}
        local = strategy.experimental_local_results(samples)
        record.update(epoch=e + 1, samples=int(sum(int(v) for v in local)))
        for v in local:
            v.assign(0)
        epoch.assign(e + 1)
        saving = time.perf_counter()
        manager.save()  # before the epoch is reported, as the other trainers do: a reported epoch is checkpointed
        s.epoch_done({**record, "seconds": time.perf_counter() - began,
                      "checkpoint_seconds": time.perf_counter() - saving})
    s.finish(net, started)
