"""What every TensorFlow training loop of orch shares: the strategy, the data and its single sharding, the
per-worker figures, and the result written from this worker's own weights."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from . import contract
from .data import PIXEL_SCALE
from .reporter import Reporter
from .worker import leave, pin, write_predictions  # noqa: F401 - the loops take them from here too


Split = tuple[np.ndarray, np.ndarray]  # a split's (x, y)


def inter_op_threads(tf_config: dict[str, Any]) -> int:
    """The fewest inter-op threads a replica of the cluster needs not to deadlock: one per worker, plus one."""
    return len(tf_config["cluster"].get("worker", ())) + 1


def _strategy(tf: Any, job: dict[str, Any]) -> Any:
    """The job's tf.distribute strategy; it must exist before any other TensorFlow op runs."""
    if job["strategy"] in ("single", "mpi"):  # mpi: each rank is a plain process; MPI does the all-reduce
        return tf.distribute.get_strategy()
    if job["strategy"] == "ps":  # the chief's view: the servers and workers are found through TF_CONFIG
        return tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())
    if job["strategy"] == "mirrored":
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            return tf.distribute.MirroredStrategy([f"/gpu:{i}" for i in range(min(job["replicas"], len(gpus)))])
        # No GPU: the replicas are logical CPU devices of this one process, sharing its cores.
        (cpu,) = tf.config.list_physical_devices("CPU")[:1]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * job["replicas"])
        return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(job["replicas"])])
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


def floats(tf: Any, x: Any) -> Any:
    """A batch as the model takes it: images kept as bytes scaled to float32 in [0, 1], in the graph, bit for bit
    what ``data.floats`` gives in NumPy; any other tensor as it is.

    ``divide_no_nan`` is the same division (the divisor is never 0), but TensorFlow's graph optimiser leaves it
    be: inside a tf.function it turns ``x / 255.0`` into a product with the reciprocal, which puts 126 of the 256
    values a bit away from every figure trained before. A lookup in a table of the 256 values is exact too, but an
    MLP step took 329 microseconds with it against 210 with this, and 207 with float32 rows
    (benchmarks/investigations/pixel_scaling.py)."""
    if x.dtype != tf.uint8:
        return x
    return tf.math.divide_no_nan(tf.cast(x, tf.float32), tf.constant(PIXEL_SCALE, tf.float32))


@dataclass
class Session:
    """One worker's job, set up: TensorFlow, the strategy, the data split, and the batch arithmetic."""

    reporter: Reporter
    job: dict[str, Any]
    worker: int
    num_workers: int
    tf: Any
    keras: Any
    models: Any
    strategy: Any
    cpus: list[int]
    train: Split
    validation: Split
    test: Split
    vocabulary: int
    role: str = "worker"
    epochs_log: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: list[int] = field(default_factory=list)

    @property
    def global_batch(self) -> int:
        return int(self.job["global_batch"])

    @property
    def per_worker(self) -> int:
        return self.global_batch // self.num_workers

    @property
    def steps_per_epoch(self) -> int:
        # Every worker must run the same number of steps; the smallest shard decides.
        return (len(self.train[0]) // self.num_workers) // self.per_worker

    @property
    def val_steps(self) -> int:
        return (len(self.validation[0]) // self.num_workers) // self.per_worker

    def input_fn(self, x: np.ndarray, y: np.ndarray, shuffle: bool, shards: Optional[Callable[[], Any]] = None,
                 source: Optional[Callable[[], Any]] = None) -> Callable[[Any], Any]:
        """The dataset function of a split, for DatasetCreator or distribute_datasets_from_function.

        ``shards`` returns (count, index) where the input context does not know them: under ps every
        worker's context says pipeline 0 of 1, and the worker's index is a tensor known when it runs.
        ``source`` makes the split's (x, y) dataset where the arrays themselves should not be captured
        (under ps they would travel to every worker inside the function)."""
        tf, job, global_batch = self.tf, self.job, self.global_batch
        pixels = x.dtype == np.uint8

        def make(ctx: Any) -> Any:
            count, index = shards() if shards else (ctx.num_input_pipelines, ctx.input_pipeline_id)
            base = source() if source else tf.data.Dataset.from_tensor_slices((x, y))
            # The only sharding there is: one shard per worker, taken once, then batched per replica.
            ds = base.shard(count, index)
            if job["cache"]:
                ds = ds.cache()
            if shuffle:
                buffer = job["shuffle_buffer"] or len(x) // count + 1
                seed = job["seed"] + tf.cast(index, tf.int64) if shards else job["seed"] + index
                ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
            ds = ds.batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)
            if pixels:  # images kept as bytes until here; other data needs no stage of its own
                ds = ds.map(lambda xs, ys: (floats(tf, xs), ys))
            ds = ds.repeat()
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
            ds = ds.with_options(options)
            if job["prefetch"]:
                ds = ds.prefetch(tf.data.AUTOTUNE if job["prefetch"] < 0 else job["prefetch"])
            return ds

        return make

    def announce(self) -> None:
        """The event that says this worker joined, and a line for its log."""
        x_tr = self.train[0]
        self.reporter.event(contract.EVENT_START, stage="training", steps_per_epoch=self.steps_per_epoch)
        self.reporter.say(
            f"{self.role} {self.worker}/{self.num_workers}: {len(x_tr)} train samples, shard of "
            f"{len(x_tr) // self.num_workers}, global batch {self.global_batch} ({self.per_worker} per worker), "
            f"{self.steps_per_epoch} steps per epoch, strategy {self.job['strategy']}"
        )

    def resumed(self, epoch: int) -> None:
        """Record the first epoch of this attempt (1-based); say so when a checkpoint skipped earlier ones."""
        if not self.resumed_from:
            self.resumed_from.append(epoch)
            if epoch > 1:
                self.reporter.event(contract.EVENT_RESUMED, epoch=epoch)
                self.reporter.say(f"{self.role} {self.worker} resumed from a checkpoint at epoch {epoch}")

    def epoch_done(self, record: dict[str, Any]) -> None:
        """Log one epoch's figures (global loss and accuracy, this worker's samples and seconds)."""
        self.epochs_log.append(record)
        self.reporter.event(contract.EVENT_EPOCH, epochs=self.job["epochs"], **record)
        self.reporter.say(
            f"{self.role} {self.worker} epoch {record['epoch']}/{self.job['epochs']} loss {record.get('loss', 0):.4f} "
            f"acc {record.get('accuracy', 0):.4f} val_acc {record.get('val_accuracy', 0):.4f} "
            f"samples {record['samples']} ({record['seconds']:.2f} s)"
        )

    def finish(self, net: Any, started: float, extra: Optional[dict[str, Any]] = None,
               wait: Optional[Callable[[], None]] = None) -> None:
        """Evaluate and write this worker's result, wait for every worker's (or call ``wait``, which waits its own
        way), and leave: never returns.

        Test accuracy is computed from this worker's own weights, on the whole test set, with no
        collective involved: every worker's figure is its own, and in sync training they agree.
        """
        train_seconds = time.perf_counter() - started
        job, (x_te, y_te) = self.job, self.test
        weights = [w for layer in net.layers for w in layer.get_weights()]
        predictions = self.models.local_predictions(job["model"], self.keras, weights, x_te, self.vocabulary)
        test_accuracy = float((predictions == y_te).mean())
        write_predictions(self.reporter, x_te, y_te, predictions)
        result = {
            "v": contract.CONTRACT_VERSION,
            "worker": self.worker,
            "num_workers": self.num_workers,
            "replicas": int(self.strategy.num_replicas_in_sync),
            "global_batch": self.global_batch,
            "per_worker_batch": self.per_worker,
            "steps_per_epoch": self.steps_per_epoch,
            "train_samples": len(self.train[0]),
            "validation_samples": len(self.validation[0]),
            "test_samples": len(x_te),
            "epochs": self.epochs_log,
            "samples_per_epoch": [e["samples"] for e in self.epochs_log],
            "resumed_from_epoch": self.resumed_from[0] if self.resumed_from else None,
            "train_seconds": train_seconds,
            "test_accuracy": test_accuracy,
            "cpus": self.cpus,
            "model": job["model"],
            "strategy": job["strategy"],
            "tensorflow": self.tf.__version__,
            "keras": self.keras.__version__,
            "job": job,
            **(extra or {}),
        }
        leave(self.reporter, result, self.num_workers, wait)


def start(reporter: Reporter, job: dict[str, Any], worker: int, num_workers: int, data_dir: str) -> Session:
    """Import TensorFlow, load and split the data, pin this worker, and make the strategy."""
    reporter.event(contract.EVENT_START, stage="importing")
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras as keras

    from . import data
    from . import model as models

    # The data first (NumPy only: no TensorFlow op runs before the strategy exists), before this worker is pinned,
    # as PyTorch's trainer loads it: workers that will share a core load it on every core the container has.
    reporter.event(contract.EVENT_START, stage="loading")
    train, validation, test = data.load(job["dataset"], data_dir, job["samples"], job["seed"])
    if job["threads"]:
        # Matched to the container's share of the cores: N workers with TF's default pools would each
        # start threads for every core and oversubscribe them.
        tf.config.threading.set_intra_op_parallelism_threads(job["threads"])
        tf.config.threading.set_inter_op_parallelism_threads(job["threads"])
    cpus = pin(os.environ.get(contract.ENV_CPUS))
    if job["strategy"] == "ps":  # the chief waits on every worker at once: as for the servers (ps_loop)
        needed = inter_op_threads(json.loads(os.environ["TF_CONFIG"]))
        tf.config.threading.set_inter_op_parallelism_threads(max(job["threads"], len(cpus), needed))
    reporter.event(contract.EVENT_START, stage="connecting")
    strategy = _strategy(tf, job)  # it must exist before any other TensorFlow op runs
    tf.keras.utils.set_random_seed(job["seed"])
    return Session(reporter=reporter, job=job, worker=worker, num_workers=num_workers, tf=tf, keras=keras,
                   models=models, strategy=strategy, cpus=cpus, train=train, validation=validation, test=test,
                   vocabulary=data.vocabulary_size(job["dataset"], data_dir), role=reporter.role)
