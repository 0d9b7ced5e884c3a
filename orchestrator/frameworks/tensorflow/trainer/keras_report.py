"""The Keras callback of ``orch_trainer.report`` (``report.keras_callback``), for users' TensorFlow scripts."""
from __future__ import annotations

import time
from typing import Any

from .report import epoch, heartbeat, started


def keras_callback(batch_size: int) -> Any:
    """A Keras callback that reports each epoch: its logs (loss, accuracy, val_loss, ...), its seconds, and
    the samples this worker trained on, counted as the batches it ran times ``batch_size`` (this worker's
    batch; with steps_per_execution 1, the default, every batch is counted)."""
    import tensorflow as tf

    class OrchReport(tf.keras.callbacks.Callback):
        def on_train_begin(self, logs: Any = None) -> None:
            started(self.params.get("steps") if self.params else None)

        def on_epoch_begin(self, number: Any, logs: Any = None) -> None:
            self.batches, self.began = 0, time.perf_counter()

        def on_train_batch_end(self, batch: Any, logs: Any = None) -> None:
            self.batches += 1
            heartbeat()

        def on_test_batch_end(self, batch: Any, logs: Any = None) -> None:
            heartbeat()

        def on_epoch_end(self, number: Any, logs: Any = None) -> None:
            metrics = {}
            for name, value in (logs or {}).items():
                try:
                    metrics[str(name)] = float(value)
                except (TypeError, ValueError):
                    continue  # not a number (a learning-rate schedule's object, say)
            for reserved in ("number", "samples", "seconds", "epoch", "epochs"):
                metrics.pop(reserved, None)
            epoch(number + 1, self.batches * batch_size, time.perf_counter() - self.began,
                  epochs=(self.params or {}).get("epochs"), **metrics)

    return OrchReport()
