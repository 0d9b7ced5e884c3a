"""What every framework's training loop shares in a worker: its cores, its predictions grid, its result's common
figures, and how it leaves."""
from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np

from . import contract
from .reporter import Reporter

process_started = time.time() - 1.0  # a result older than this is from an earlier attempt of the group


def pin(cpus: str | None) -> list[int]:
    """Pin every thread of this process to ``cpus`` ("0", "0-3", "0,2"); return the cores it may use.

    Done after TensorFlow's import, which is CPU-bound and runs in every worker at once: pinned from
    the start, three workers on two cores import at half speed on the shared core. Done before the
    strategy exists, so TensorFlow sizes its thread pools to the share. Threads started later inherit it.
    """
    if cpus:
        wanted: set[int] = set()
        for part in cpus.split(","):
            first, _, last = part.partition("-")
            wanted.update(range(int(first), int(last or first) + 1))
        place(os.listdir("/proc/self/task"), wanted)
    return sorted(os.sched_getaffinity(0))


def place(threads: Iterable[int | str], cores: set[int]) -> list[int]:
    """Let each of ``threads`` (ids of this process's threads) run on ``cores`` alone; return the ids of those
    placed (a thread that ended meanwhile is not)."""
    placed = []
    for tid in threads:
        try:
            os.sched_setaffinity(int(tid), cores)
            placed.append(int(tid))
        except (ProcessLookupError, FileNotFoundError):
            pass  # a thread that ended meanwhile
    return placed


@contextlib.contextmanager
def threads_left_free(cores: set[int]) -> Iterator[list[int]]:
    """Threads started inside the block run on ``cores`` (the container's), not on the share the starting thread
    is pinned to; yields the list their ids are added to when the block ends. For a transport's own threads,
    which pass each collective's messages: pinned beside the rank's computing thread, gloo's all-reduce took
    2.5 to 3.6 times as long (benchmarks/investigations/step_cost.py --framework torch)."""
    before = set(os.listdir("/proc/self/task"))
    started: list[int] = []
    yield started
    started += place(set(os.listdir("/proc/self/task")) - before, cores)


def write_predictions(reporter: Reporter, x: np.ndarray, y_true: np.ndarray, y_pred: np.ndarray) -> None:
    """For image data, a grid of the first test images with this worker's predictions, written whole and then
    renamed: never half a file. Text data has no grid."""
    if x.ndim != 2 or x.shape[1] != 784:
        return
    grid = slice(0, min(25, len(x)))
    target = os.path.join(reporter.dir, contract.PREDICTIONS_FILE)
    with open(target + ".tmp", "wb") as f:
        pixels = x[grid] if x.dtype == np.uint8 else (x[grid] * 255).round().astype(np.uint8)  # bytes, or [0, 1]
        np.savez_compressed(f, x=pixels, y_true=y_true[grid],
                            y_pred=y_pred[grid].astype(np.int32))
    os.replace(target + ".tmp", target)


def result_of(job: dict[str, Any], worker: int, num_workers: int, per_worker_batch: int, steps_per_epoch: int,
              train_samples: int, test_samples: int, epochs: list[dict[str, Any]], resumed_from: Optional[int],
              train_seconds: float, test_accuracy: float, cpus: list[int], **own: Any) -> dict[str, Any]:
    """A worker's result.json as a loop that trains on every replica writes it (one replica per worker): the
    job's shape, this worker's measured epochs and samples, its train seconds and its own test accuracy; then the
    framework's ``own`` figures, and the job."""
    samples = [e["samples"] for e in epochs]
    return {
        "v": contract.CONTRACT_VERSION, "worker": worker, "num_workers": num_workers, "replicas": num_workers,
        "global_batch": job["global_batch"], "per_worker_batch": per_worker_batch, "steps_per_epoch": steps_per_epoch,
        "train_samples": train_samples, "validation_samples": contract.split_sizes(job["samples"])[1],
        "test_samples": test_samples, "epochs": epochs, "samples_per_epoch": samples,
        "resumed_from_epoch": resumed_from, "train_seconds": train_seconds,
        "samples_per_second": sum(samples) / train_seconds if train_seconds else 0.0,
        "test_accuracy": test_accuracy, "cpus": cpus, "model": job["model"], "strategy": job["strategy"],
        **own, "job": job,
    }


def leave(reporter: Reporter, result: dict[str, Any], num_workers: int,
          wait: Optional[Callable[[], None]] = None) -> None:
    """Write this worker's result, tell the others, and leave once every worker has written its own (or once
    ``wait``, which waits its own way, returns): never returns.

    This worker's collectives are all behind it. Once every worker has written its result, none needs
    another, so all leave at once: what a framework does after the last epoch (checkpoint clean-up, shutdown
    barriers) can idle for half a minute and adds nothing. Until then this worker stays, since a peer may
    still be reading its last all-reduce buffer.
    """
    reporter.write_json(contract.RESULT_FILE, result)
    reporter.mark_done()
    reporter.event(contract.EVENT_DONE, train_seconds=result["train_seconds"], test_accuracy=result["test_accuracy"])
    reporter.say(f"{reporter.role} {reporter.worker} done: train {result['train_seconds']:.2f} s, "
                 f"test accuracy {result['test_accuracy']:.4f}")
    if wait is not None:
        wait()
    else:
        reporter.wait_for_results(num_workers, since=process_started)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def cores_of(threads: list[int]) -> list[int]:
    """The cores any of ``threads`` (ids of this process's threads) may run on now; those that ended count none."""
    cores: set[int] = set()
    for tid in threads:
        try:
            cores |= os.sched_getaffinity(tid)
        except OSError:  # a thread that ended meanwhile
            pass
    return sorted(cores)


def weights_digest(arrays: Iterable[np.ndarray]) -> str:
    """The SHA-256 of a model's weights, bit for bit, in their order: ranks that stayed identical share it."""
    import hashlib

    digest = hashlib.sha256()
    for a in arrays:
        digest.update(np.ascontiguousarray(a).tobytes())
    return digest.hexdigest()
