"""Entry point of a worker container: train, emit events, write results."""
from __future__ import annotations

import os
import sys
import time
import traceback

import numpy as np

from . import contract
from .reporter import Reporter, job_from_env

process_started = time.time() - 1.0  # a result older than this is from an earlier attempt of the group


def _pin(cpus: str | None) -> list[int]:
    """Pin every thread of this process to ``cpus`` ("0", "0-3", "0,2"); return the cores it may use.

    Done after TensorFlow's import, which is CPU-bound and runs in every worker at once: pinned from
    the start, three workers on two cores import at half speed on the shared core. Done before the
    strategy exists, so TensorFlow sizes its thread pools to the share. Threads started later inherit it.
    """
    if cpus:
        wanted = set()
        for part in cpus.split(","):
            first, _, last = part.partition("-")
            wanted.update(range(int(first), int(last or first) + 1))
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), wanted)
            except (ProcessLookupError, FileNotFoundError):
                pass  # a thread that ended meanwhile
    return sorted(os.sched_getaffinity(0))


def _strategy(tf, job: dict, num_workers: int):
    if num_workers == 1:
        return tf.distribute.get_strategy()
    implementation = {
        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
        "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
    }[job["collective"]]
    options = tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=job["bytes_per_pack"],
        timeout_seconds=job["collective_timeout"] or None,
        implementation=implementation,
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def run(reporter: Reporter, job: dict, worker: int, num_workers: int, data_dir: str) -> dict:
    """Train one worker's part of the job and return its result record."""
    reporter.event(contract.EVENT_START, stage="importing")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras as keras

    from . import data, model as models

    if job["threads"]:
        # Matched to the container's share of the cores: N workers with TF's default pools would each
        # start threads for every core and oversubscribe them.
        tf.config.threading.set_intra_op_parallelism_threads(job["threads"])
        tf.config.threading.set_inter_op_parallelism_threads(job["threads"])
    cpus = _pin(os.environ.get(contract.ENV_CPUS))
    reporter.event(contract.EVENT_START, stage="connecting")
    # The strategy must exist before any other TensorFlow op runs.
    strategy = _strategy(tf, job, num_workers)
    tf.keras.utils.set_random_seed(job["seed"])

    (x_tr, y_tr), (x_val, y_val), (x_te, y_te) = data.load(job["dataset"], data_dir, job["samples"], job["seed"])
    global_batch = job["global_batch"]
    per_worker = global_batch // num_workers
    # Every worker must run the same number of steps; the smallest shard decides.
    steps_per_epoch = (len(x_tr) // num_workers) // per_worker
    val_steps = (len(x_val) // num_workers) // per_worker

    def pipeline(x, y, shuffle: bool):
        def make(ctx: tf.distribute.InputContext):
            # The only sharding there is: one shard per worker, taken once, then batched per worker.
            ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            if job["cache"]:
                ds = ds.cache()
            if shuffle:
                buffer = job["shuffle_buffer"] or len(x) // ctx.num_input_pipelines + 1
                ds = ds.shuffle(buffer, seed=job["seed"] + ctx.input_pipeline_id, reshuffle_each_iteration=True)
            ds = ds.batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True).repeat()
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
            ds = ds.with_options(options)
            if job["prefetch"]:
                ds = ds.prefetch(tf.data.AUTOTUNE if job["prefetch"] < 0 else job["prefetch"])
            return ds

        return keras.utils.experimental.DatasetCreator(make)

    with strategy.scope():
        net = models.build_mlp(keras, tf, step_logs=job["log_reduction"] != "epoch")
        net.compile(
            optimizer=keras.optimizers.Adam(learning_rate=job["learning_rate"]),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            steps_per_execution=job["steps_per_execution"],
        )
        # With Keras' steps (log_reduction first or sum), its default ("auto" = sum) all-reduces the
        # step's logs after every step: one more latency-bound collective per step. "first" keeps them
        # local. Measured: 2 epochs on 3 workers took 14.9 s instead of 18.6 s. The default, "epoch",
        # has no step logs at all (see model.CountingModel).
        net.distribute_reduction_method = "first" if job["log_reduction"] == "epoch" else job["log_reduction"]

    epochs_log: list[dict] = []
    resumed_from: list[int] = []

    class Events(keras.callbacks.Callback):
        beat = 0.0
        in_epoch = False
        train_metrics = None

        def _heartbeat(self) -> None:
            # Progress the orchestrator can see: a stalled all-reduce stops it on every worker.
            now = time.time()
            if now - self.beat >= 1.0:
                self.beat = now
                reporter.heartbeat(now)

        def on_train_batch_end(self, batch, logs=None):
            self._heartbeat()

        def on_test_batch_end(self, batch, logs=None):
            self._heartbeat()

        def _metrics(self, prefix: str = "") -> dict:
            # Read across workers (an all-reduce per variable), in the same order on every worker.
            return {prefix + m.name: float(m.result()) for m in net.metrics}

        def on_test_begin(self, logs=None):
            # fit() validates after each epoch's training and resets the metrics first: read them now.
            if self.in_epoch:
                self.train_metrics = self._metrics()

        def on_epoch_begin(self, epoch, logs=None):
            self.in_epoch, self.train_metrics = True, None
            self.started = time.perf_counter()
            if not resumed_from:
                resumed_from.append(epoch + 1)
                if epoch > 0:  # BackupAndRestore skipped the epochs its checkpoint already holds
                    reporter.event(contract.EVENT_RESUMED, epoch=epoch + 1)
                    reporter.say(f"worker {worker} resumed from a checkpoint at epoch {epoch + 1}")

        def on_epoch_end(self, epoch, logs=None):
            local = strategy.experimental_local_results(net.samples_seen)
            samples = int(sum(int(v.numpy()) for v in local))
            for v in local:
                v.assign(0)
            self.in_epoch = False
            if self.train_metrics is None:  # no validation ran: the metrics still hold the training figures
                record = self._metrics()
            else:
                record = {**self.train_metrics, **self._metrics("val_")}
            record.update({k: float(v) for k, v in (logs or {}).items() if not k.endswith(models.LOCAL_LOG)})
            record.update(epoch=epoch + 1, seconds=time.perf_counter() - self.started, samples=samples)
            epochs_log.append(record)
            reporter.event(contract.EVENT_EPOCH, epochs=job["epochs"], **record)
            reporter.say(
                f"worker {worker} epoch {epoch + 1}/{job['epochs']} loss {record.get('loss', 0):.4f} "
                f"acc {record.get('accuracy', 0):.4f} val_acc {record.get('val_accuracy', 0):.4f} "
                f"samples {samples} ({record['seconds']:.2f} s)"
            )
            if epoch + 1 == job["epochs"]:
                finish()

    finished: list[dict] = []

    def finish() -> None:
        """Evaluate and write this worker's result: called at the end of the last epoch, so the result
        does not wait for TensorFlow's teardown at the end of fit(), which can idle for half a minute."""
        train_seconds = time.perf_counter() - started
        # Test accuracy is computed from this worker's own weights, on the whole test set, with no
        # collective involved: every worker's figure is its own, and in sync training they agree.
        weights = [w for layer in net.layers for w in layer.get_weights()]
        predictions = models.mlp_logits(weights, x_te).argmax(axis=1)
        test_accuracy = float((predictions == y_te).mean())
        grid = slice(0, min(25, len(x_te)))
        target = os.path.join(reporter.dir, contract.PREDICTIONS_FILE)
        with open(target + ".tmp", "wb") as f:  # written whole, then renamed: never half a file
            np.savez_compressed(f, x=(x_te[grid] * 255).round().astype(np.uint8), y_true=y_te[grid],
                                y_pred=predictions[grid])
        os.replace(target + ".tmp", target)
        result = {
            "v": contract.CONTRACT_VERSION,
            "worker": worker,
            "num_workers": num_workers,
            "replicas": int(strategy.num_replicas_in_sync),
            "global_batch": global_batch,
            "per_worker_batch": per_worker,
            "steps_per_epoch": steps_per_epoch,
            "train_samples": len(x_tr),
            "validation_samples": len(x_val),
            "test_samples": len(x_te),
            "epochs": epochs_log,
            "samples_per_epoch": [e["samples"] for e in epochs_log],
            "resumed_from_epoch": resumed_from[0] if resumed_from else None,
            "train_seconds": train_seconds,
            "test_accuracy": test_accuracy,
            "cpus": cpus,
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "job": job,
        }
        reporter.write_json(contract.RESULT_FILE, result)
        reporter.mark_done()
        reporter.event(contract.EVENT_DONE, train_seconds=train_seconds, test_accuracy=test_accuracy)
        reporter.say(f"worker {worker} done: train {train_seconds:.2f} s, test accuracy {test_accuracy:.4f}")
        finished.append(result)
        # This worker's collectives are all behind it. Once every worker has written its result, none
        # needs another, so all leave at once: what fit() and the collective runtime do after the last
        # epoch (checkpoint clean-up, shutdown barriers) can idle for half a minute and adds nothing.
        # Until then this worker stays, since a peer may still be reading its last all-reduce buffer.
        reporter.wait_for_results(num_workers, since=process_started)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    reporter.event(contract.EVENT_START, stage="training", steps_per_epoch=steps_per_epoch)
    reporter.say(
        f"worker {worker}/{num_workers}: {len(x_tr)} train samples, shard of {len(x_tr) // num_workers}, "
        f"global batch {global_batch} ({per_worker} per worker), {steps_per_epoch} steps per epoch"
    )
    # Checkpoints go to the shared run directory: after a restart of the whole group, fit() resumes
    # from the last one instead of from scratch. save_freq counts fit's batch callbacks, one per
    # steps_per_execution steps.
    every = job["checkpoint_every"]
    backup = keras.callbacks.BackupAndRestore(
        backup_dir=os.path.join(reporter.out_dir, contract.CHECKPOINT_DIR),
        save_freq="epoch" if every == 0 else max(1, every // job["steps_per_execution"]),
    )
    started = time.perf_counter()
    net.fit(
        pipeline(x_tr, y_tr, shuffle=True),
        epochs=job["epochs"],
        steps_per_epoch=steps_per_epoch,
        validation_data=pipeline(x_val, y_val, shuffle=False),
        validation_steps=val_steps,
        callbacks=[backup, Events()],
        verbose=0,
    )
    if not finished:  # resumed from a checkpoint that already held every epoch
        finish()
    return finished[0]


def main() -> int:
    job, worker, num_workers, data_dir, out_dir = job_from_env()
    reporter = Reporter(out_dir, worker)
    try:
        run(reporter, job, worker, num_workers, data_dir)
    except Exception as exc:  # report, then fail the container: the orchestrator reads the exit code
        reporter.event(contract.EVENT_ERROR, message=f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
        return 1
    sys.stdout.flush()
    return 0
