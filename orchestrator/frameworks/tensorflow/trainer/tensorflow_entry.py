"""TensorFlow's trainer entry: Keras' fit() under the job's strategy, or the custom and parameter-server
loops; ``run`` is what the worker's main calls for a job of this framework."""
from __future__ import annotations

import os
import time
from typing import Any, Optional

from . import contract
from .reporter import Reporter
from .session import Session, start


def train_with_fit(s: Session) -> None:
    """Keras' fit() under the strategy, with orch's steps (metrics read across workers once per epoch)."""
    tf, keras, job, models, strategy, reporter = s.tf, s.keras, s.job, s.models, s.strategy, s.reporter
    with strategy.scope():
        net = models.build(job["model"], keras, tf, s.train[0], s.vocabulary, step_logs=job["log_reduction"] != "epoch")
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

    class Events(keras.callbacks.Callback):  # type: ignore[name-defined]  # Keras' own, imported at run time
        """Progress, and each epoch's figures: besides its seconds, what of them went to validation, to reading
        the metrics across workers and to the checkpoint, so a run's time can be told apart from its steps'."""

        beat = 0.0
        in_epoch = False
        train_metrics: Optional[dict[str, Any]] = None
        validation_began = checkpoint_began = 0.0
        validation_seconds = reduction_seconds = 0.0

        def _heartbeat(self) -> None:
            # Progress the orchestrator can see: a stalled all-reduce stops it on every worker.
            now = time.time()
            if now - self.beat >= 1.0:
                self.beat = now
                reporter.heartbeat(now)

        def on_train_batch_end(self, batch: int, logs: Optional[dict[str, Any]] = None) -> None:
            self._heartbeat()

        def on_test_batch_end(self, batch: int, logs: Optional[dict[str, Any]] = None) -> None:
            self._heartbeat()

        def _metrics(self, prefix: str = "") -> dict[str, Any]:
            # Read across workers (an all-reduce per variable), in the same order on every worker.
            return {prefix + m.name: float(m.result()) for m in net.metrics}

        def on_test_begin(self, logs: Optional[dict[str, Any]] = None) -> None:
            # fit() validates after each epoch's training and resets the metrics first: read them now.
            if self.in_epoch:
                began = time.perf_counter()
                self.train_metrics = self._metrics()
                self.reduction_seconds += time.perf_counter() - began
                self.validation_began = time.perf_counter()

        def on_test_end(self, logs: Optional[dict[str, Any]] = None) -> None:
            if self.in_epoch:
                self.validation_seconds = time.perf_counter() - self.validation_began

        def on_epoch_begin(self, epoch: int, logs: Optional[dict[str, Any]] = None) -> None:
            self.in_epoch, self.train_metrics = True, None
            self.validation_seconds = self.reduction_seconds = 0.0
            self.started = time.perf_counter()
            s.resumed(epoch + 1)  # BackupAndRestore skips the epochs its checkpoint already holds

        def on_epoch_end(self, epoch: int, logs: Optional[dict[str, Any]] = None) -> None:
            checkpoint_seconds = time.perf_counter() - marks.epoch_ended  # BackupAndRestore ran in between
            began = time.perf_counter()
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
            self.reduction_seconds += time.perf_counter() - began
            record.update(epoch=epoch + 1, seconds=time.perf_counter() - self.started, samples=samples,
                          validation_seconds=self.validation_seconds, reduction_seconds=self.reduction_seconds,
                          checkpoint_seconds=checkpoint_seconds)
            s.epoch_done(record)
            if epoch + 1 == job["epochs"]:
                # The result is written from the last epoch's callback: it does not wait for TensorFlow's
                # teardown at the end of fit(), which can idle for half a minute.
                s.finish(net, started)

    class Marks(keras.callbacks.Callback):  # type: ignore[name-defined]  # Keras' own, imported at run time
        """Runs before BackupAndRestore at each epoch's end, so Events can time the checkpoint."""

        epoch_ended = 0.0

        def on_epoch_end(self, epoch: int, logs: Optional[dict[str, Any]] = None) -> None:
            self.epoch_ended = time.perf_counter()

    marks = Marks()
    s.announce()
    # Checkpoints go to the shared folder: after a restart of the whole group, fit() resumes from the
    # last one instead of from scratch. save_freq counts fit's batch callbacks, one per
    # steps_per_execution steps.
    every = job["checkpoint_every"]
    backup = keras.callbacks.BackupAndRestore(
        backup_dir=os.path.join(reporter.out_dir, contract.CHECKPOINT_DIR),
        save_freq="epoch" if every == 0 else max(1, every // job["steps_per_execution"]),
    )
    started = time.perf_counter()
    creator = keras.utils.experimental.DatasetCreator
    net.fit(
        creator(s.input_fn(*s.train, shuffle=True)),
        epochs=job["epochs"],
        steps_per_epoch=s.steps_per_epoch,
        validation_data=creator(s.input_fn(*s.validation, shuffle=False)),
        validation_steps=s.val_steps,
        callbacks=[marks, backup, Events()],
        verbose=0,
    )
    s.finish(net, started)  # resumed from a checkpoint that already held every epoch


def run(reporter: Reporter, job: dict[str, Any], worker: int, num_workers: int, data_dir: str) -> None:
    """Train this worker with the job's strategy (a parameter server only serves)."""
    if job["strategy"] == "ps" and reporter.role != "chief":
        from .ps_loop import serve

        serve(reporter, job)
        return
    session = start(reporter, job, worker, num_workers, data_dir)
    if job["strategy"] == "ps":
        from .ps_loop import train_with_ps

        train_with_ps(session)
    elif job["strategy"] == "custom":
        from .custom_loop import train_with_custom_loop

        train_with_custom_loop(session)
    else:
        train_with_fit(session)
