"""Data sets for the trainer, read from the host-prepared, read-only data directory."""
from __future__ import annotations

import os

import numpy as np

from . import contract

Split = tuple[np.ndarray, np.ndarray]


def _synthetic(samples: int, seed: int) -> Split:
    """Deterministic MNIST-shaped data: 10 faint prototypes under noise.

    The classes are separable (a nearest-prototype rule scores about 0.999), but faint enough that a
    short run stays short of that, so runs differ in their figures.
    """
    rng = np.random.default_rng(1234)  # the classes are fixed; `seed` only picks the draw
    prototypes = 0.5 + 0.2 * (rng.random((10, 784), dtype=np.float32) - 0.5)
    draw = np.random.default_rng(seed)
    y = draw.integers(0, 10, size=samples).astype(np.int32)
    noise = draw.normal(0.0, 0.3, size=(samples, 784)).astype(np.float32)
    x = np.clip(prototypes[y] + noise, 0.0, 1.0)
    return x, y


def _mnist(data_dir: str, samples: int, seed: int) -> Split:
    with np.load(os.path.join(data_dir, contract.MNIST_FILE)) as f:
        x_all, y_all = f["x"], f["y"]
    pick = np.random.default_rng(seed).permutation(len(x_all))[:samples]
    return (x_all[pick].astype(np.float32) / 255.0), y_all[pick].astype(np.int32)


def load(dataset: str, data_dir: str, samples: int, seed: int) -> tuple[Split, Split, Split]:
    """Draw ``samples`` with ``seed`` and split them 64/16/20 into train, validation and test.

    Every worker calls this with the same arguments and so holds the same split; sharding the training
    part across workers happens once, in the input pipeline.
    """
    if dataset == "synthetic":
        x, y = _synthetic(samples, seed)
    elif dataset == "mnist":
        x, y = _mnist(data_dir, samples, seed)
    else:
        raise ValueError(f"unknown dataset {dataset!r}")
    n_train, n_val, _ = contract.split_sizes(samples)
    a, b = n_train, n_train + n_val
    return (x[:a], y[:a]), (x[a:b], y[a:b]), (x[b:], y[b:])
