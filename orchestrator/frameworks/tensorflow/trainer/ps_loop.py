"""Seed 001's parameter-server training: ParameterServerStrategy with a chief, K servers and N workers.

Each is its own container. The servers hold the variables; the workers run the steps the chief schedules,
each reading the variables from the servers and writing its update back, never waiting for another
worker: training is asynchronous. What orch's figures mean under it:

- An epoch is ``train samples // global batch`` steps. Each step is one global batch on one worker (one
  update of the variables), so the global batch means what it means for the synchronous strategies.
- Every worker reads its own shard of the training data (sharded once, by worker index), repeated; which
  worker runs a step is up to the coordinator, so a faster worker runs more of them.
- ``samples_per_epoch`` counts the samples of the steps the workers ran in the epoch. Each scheduled
  function returns the index of the worker that ran it, so the epoch record also holds what each worker
  did (``samples_worker_<i>``): measured, not assumed to be an even share.
- Loss and accuracy are the training metrics the workers accumulate on the servers. Validation and test
  accuracy are computed by the chief alone from the model's weights as the servers hold them after the
  epoch (the workers keep no weights of their own).
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

from . import contract
from .reporter import Reporter
from .session import Session, inter_op_threads
from .worker import pin

CHECKPOINT_SUBDIR = "ps"
DATA_SUBDIR = "ps-data"  # under the shared folder: the training split, as fixed-length records


def _records(tf: Any, split: tuple[np.ndarray, np.ndarray], folder: str) -> Any:
    """Write ``split`` (x, y) as fixed-length records into ``folder``, which every replica mounts at the same
    path, and return a function that reads them back as a dataset on whichever worker runs it.

    A dataset made from the arrays themselves would carry them inside the function the chief sends to
    each worker: 140 MB of Fashion-MNIST per worker, several copies of it at once, and the workers ran
    out of memory."""
    x, y = np.ascontiguousarray(split[0]), np.ascontiguousarray(split[1]).astype(np.int32)
    os.makedirs(folder, exist_ok=True)
    paths = {}
    for name, array in (("x", x), ("y", y)):
        paths[name] = os.path.join(folder, f"train-{name}.raw")
        with open(paths[name] + ".tmp", "wb") as f:
            f.write(array.tobytes())
        os.replace(paths[name] + ".tmp", paths[name])
    features, x_type = int(np.prod(x.shape[1:])), tf.as_dtype(x.dtype)

    def source() -> Any:
        xs = tf.data.FixedLengthRecordDataset(paths["x"], features * x.itemsize).map(
            lambda r: tf.reshape(tf.io.decode_raw(r, x_type), [features]))
        ys = tf.data.FixedLengthRecordDataset(paths["y"], 4).map(lambda r: tf.io.decode_raw(r, tf.int32)[0])
        return tf.data.Dataset.zip((xs, ys))

    return source


def serve(reporter: Reporter, job: dict[str, Any]) -> None:
    """A parameter server or a worker: start TensorFlow's server and serve the chief until stopped."""
    # A worker or server that loses a peer fails the call at once rather than retrying it: the chief
    # sees the error and orch restarts the group.
    os.environ["GRPC_FAIL_FAST"] = "use_caller"
    import tensorflow as tf

    cpus = pin(os.environ.get(contract.ENV_CPUS))
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    # A step on a worker blocks an inter-op thread while it waits for the variables it reads from the
    # servers; pinned to one core, TensorFlow would size the pool to one thread and deadlock.
    threads = tf.compat.v1.ConfigProto(
        inter_op_parallelism_threads=max(job["threads"], len(cpus), inter_op_threads(config)),
        intra_op_parallelism_threads=job["threads"] or len(cpus))
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=task["type"], task_index=task["index"],
                                  protocol=resolver.rpc_layer or "grpc", config=threads, start=True)
    reporter.say(f"{task['type']} {task['index']} serving the chief")
    server.join()


def train_with_ps(s: Session) -> None:
    """The chief: schedule the steps on the workers, and write the result (never returns)."""
    tf, keras, job, strategy, reporter, models = s.tf, s.keras, s.job, s.strategy, s.reporter, s.models
    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    workers, servers = len(cluster["worker"]), len(cluster["ps"])
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        net = models.build(job["model"], keras, tf, s.train[0], s.vocabulary)
        optimizer = keras.optimizers.Adam(learning_rate=job["learning_rate"])
        loss_metric, accuracy_metric = keras.metrics.Mean(), keras.metrics.SparseCategoricalAccuracy()
    per_example = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)
    epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=net, optimizer=optimizer, epoch=epoch)
    folder = os.path.join(reporter.out_dir, contract.CHECKPOINT_DIR, CHECKPOINT_SUBDIR)
    manager = tf.train.CheckpointManager(checkpoint, folder, max_to_keep=1)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint)

    def shards() -> Any:
        return workers, tf.distribute.coordinator.experimental_get_current_worker_index()

    make = s.input_fn(*s.train, shuffle=True, shards=shards, source=_records(tf, s.train, os.path.join(
        reporter.out_dir, contract.SHARED_DIR, DATA_SUBDIR)))

    @tf.function
    def per_worker_dataset() -> Any:
        return strategy.distribute_datasets_from_function(make)

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset))

    def replica_step(x: Any, y: Any) -> None:
        with tf.GradientTape() as tape:
            logits = net(x, training=True)
            losses = per_example(y, logits)
            loss = tf.nn.compute_average_loss(losses, global_batch_size=s.global_batch)
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables))
        loss_metric.update_state(losses)
        accuracy_metric.update_state(y, logits)

    @tf.function
    def run_steps(iterator: Any, steps: Any) -> Any:
        for _ in tf.range(steps):
            strategy.run(replica_step, args=next(iterator))
        # Which worker ran these steps: the figure the per-worker samples are counted from.
        return tf.distribute.coordinator.experimental_get_current_worker_index()

    s.announce()
    reporter.say(f"chief: {servers} parameter server(s), {workers} worker(s), asynchronous steps of "
                 f"{s.global_batch} samples each")
    started = time.perf_counter()
    chunk = job["steps_per_execution"]
    x_val, y_val = s.validation
    for e in range(int(epoch.numpy()), job["epochs"]):
        s.resumed(e + 1)
        began = time.perf_counter()
        loss_metric.reset_state()
        accuracy_metric.reset_state()
        sizes = [min(chunk, s.steps_per_epoch - first) for first in range(0, s.steps_per_epoch, chunk)]
        scheduled = [(coordinator.schedule(run_steps, args=(iterator, tf.constant(n))), n) for n in sizes]
        by_worker = [0] * workers
        beat = 0.0
        for remote, n in scheduled:
            by_worker[int(remote.fetch())] += n * s.global_batch  # waits for this closure; raises its error
            now = time.time()
            if now - beat >= 1.0:  # progress the orchestrator can see
                beat = now
                reporter.heartbeat(now)
        coordinator.join()
        weights = [w for layer in net.layers for w in layer.get_weights()]
        logits = models.local_logits(job["model"], keras, weights, x_val, s.vocabulary)
        record = {"loss": float(loss_metric.result()), "accuracy": float(accuracy_metric.result()),
                  "val_loss": models.cross_entropy(logits, y_val),
                  "val_accuracy": float((logits.argmax(axis=1) == y_val).mean()) if len(y_val) else 0.0,
                  "epoch": e + 1, "samples": sum(by_worker),
                  **{f"samples_worker_{i}": n for i, n in enumerate(by_worker)}}
        epoch.assign(e + 1)
        saving = time.perf_counter()
        manager.save()  # before the epoch is reported: a group restarted after a reported epoch resumes after it
        s.epoch_done({**record, "seconds": time.perf_counter() - began,
                      "checkpoint_seconds": time.perf_counter() - saving})
    s.finish(net, started, extra={"workers": workers, "parameter_servers": servers})
