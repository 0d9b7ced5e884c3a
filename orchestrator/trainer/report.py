"""A few lines that give a user's own script (`orch up --script`) orch's figures in `collect` and reports.

Without them a script still gets its wall time, exit status, logs and resource figures. With them it also
gets epochs, samples per epoch, train seconds and test accuracy, and orch's stall timeout watches it::

    from orch_trainer import report

    model.fit(dataset, epochs=5, callbacks=[report.keras_callback(batch_size=64)])  # this worker's batch
    report.result(test_accuracy=accuracy)  # computed from this worker's own weights

A custom loop calls ``report.epoch(...)`` once per epoch instead of the callback, and
``report.heartbeat()`` now and then. Everything goes through the reporter orch's own trainer uses.
"""
from __future__ import annotations

import os
import time
from typing import Any, Optional

from . import contract
from .reporter import Reporter, role_from_env

_state: dict[str, Any] = {"reporter": None, "epochs": [], "started": None, "beat": 0.0}


def _reporter() -> Reporter:
    if _state["reporter"] is None:
        _state["reporter"] = Reporter(os.environ.get(contract.ENV_OUT_DIR, contract.OUT_MOUNT),
                                      int(os.environ.get(contract.ENV_WORKER_INDEX, "0")), role_from_env())
    reporter: Reporter = _state["reporter"]
    return reporter


def started(steps_per_epoch: Optional[int] = None) -> None:
    """Say that training began: this replica has joined, and from now on orch expects its heartbeats."""
    if _state["started"] is None:
        _state["started"] = time.perf_counter()
        _reporter().event(contract.EVENT_START, stage="training", steps_per_epoch=steps_per_epoch)


def heartbeat() -> None:
    """Progress orch can see (at most once a second is written); call it every step or so."""
    now = time.time()
    if now - _state["beat"] >= 1.0:
        _state["beat"] = now
        _reporter().heartbeat(now)


def epoch(number: int, samples: int, seconds: Optional[float] = None, epochs: Optional[int] = None,
          **metrics: float) -> None:
    """One finished epoch (1-based) of ``epochs``: the samples this worker trained on, and metrics such as
    loss, accuracy, val_loss and val_accuracy."""
    started()
    record = {"epoch": int(number), "samples": int(samples), **{k: float(v) for k, v in metrics.items()}}
    if seconds is not None:
        record["seconds"] = float(seconds)
    _state["epochs"].append(record)
    _reporter().event(contract.EVENT_EPOCH, **record, **({"epochs": int(epochs)} if epochs else {}))
    heartbeat()


def result(test_accuracy: float, train_seconds: Optional[float] = None, **figures: Any) -> None:
    """This worker's result: its test accuracy (from its own weights) and the epochs reported so far."""
    reporter = _reporter()
    if train_seconds is None:
        train_seconds = time.perf_counter() - (_state["started"] or time.perf_counter())
    epochs = _state["epochs"]
    reporter.write_json(contract.RESULT_FILE, {
        "v": contract.CONTRACT_VERSION,
        "worker": reporter.worker,
        "epochs": epochs,
        "samples_per_epoch": [e["samples"] for e in epochs],
        "train_seconds": float(train_seconds),
        "test_accuracy": float(test_accuracy),
        **figures,
    })
    reporter.event(contract.EVENT_DONE, train_seconds=float(train_seconds), test_accuracy=float(test_accuracy))


def keras_callback(batch_size: int) -> Any:
    """A Keras callback that reports each epoch: its logs (loss, accuracy, val_loss, ...), its seconds, and
    the samples this worker trained on, counted as the batches it ran times ``batch_size`` (this worker's
    batch; with steps_per_execution 1, the default, every batch is counted). TensorFlow's trainer holds it, in
    TensorFlow's image only: found by name, since the other images have no Keras and no such module."""
    import importlib

    try:
        module = importlib.import_module(f"{__package__}.keras_report")
    except ModuleNotFoundError:
        raise RuntimeError("keras_callback is for Keras' fit(); this image is not TensorFlow's") from None
    return module.keras_callback(batch_size)
