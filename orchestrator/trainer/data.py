"""Data sets for the trainer, read from the host-prepared, read-only data directory.

NumPy and the standard library only. Images come as their bytes, uint8 (flat 28 x 28): each trainer scales a
batch to float32 in [0, 1] as it takes it (``floats`` here, the same values in TensorFlow's graphs and in
PyTorch), so no worker holds the split at 4 bytes a pixel. Synthetic images come as float32 in [0, 1]; text as
int32 token ids (0 padding, 1 unknown); labels as int32.
"""
from __future__ import annotations

import os

import numpy as np

from . import contract

Split = tuple[np.ndarray, np.ndarray]
PIXEL_SCALE = 255.0  # a pixel's byte over this is its value in [0, 1]

IMAGE_FILES = {"mnist": contract.MNIST_FILE, "fashion-mnist": contract.FASHION_MNIST_FILE}
TEXT_FILES = {"vader-reviews": contract.VADER_REVIEWS_FILE}


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


def _check_samples(dataset: str, samples: int, available: int) -> None:
    if not 0 < samples <= available:
        raise ValueError(f"{dataset} has {available} samples, {samples} asked for")


def _images(dataset: str, path: str, samples: int, seed: int) -> Split:
    with np.load(path) as f:
        x_all, y_all = f["x"], f["y"]
    _check_samples(dataset, samples, len(x_all))
    if x_all.dtype != np.uint8:
        raise ValueError(f"{dataset}'s images are {x_all.dtype}, not bytes (uint8): prepare the data again")
    pick = np.random.default_rng(seed).permutation(len(x_all))[:samples]
    # Kept as bytes: scaling 60,000 images to float32 here took each worker about 0.4 s of CPU while every worker
    # started at once, and 188 MB (benchmarks/investigations/results/start_ab-torch-images-scaled-per-batch.md).
    return x_all[pick], y_all[pick].astype(np.int32)


def floats(x: np.ndarray) -> np.ndarray:
    """``x`` as the model takes it: images kept as bytes scaled to float32 in [0, 1], bit for bit what
    ``x.astype(np.float32) / 255.0`` gives; any other array (synthetic images, text) as it is."""
    if x.dtype != np.uint8:
        return x
    scaled = x.astype(np.float32)
    scaled /= np.float32(PIXEL_SCALE)
    return scaled


def _text(dataset: str, path: str, samples: int, seed: int) -> Split:
    """Training samples from the rows the host built the vocabulary from, the others from the rest.

    The host stores its training part first (``train`` rows). Drawing ``split_sizes(samples)`` from the
    two parts keeps every validation and test text out of the vocabulary's making; both parts are large
    enough for any ``samples`` up to the whole set.
    """
    with np.load(path) as f:
        x_all, y_all, in_train = f["x"], f["y"], int(f["train"])
    _check_samples(dataset, samples, len(x_all))
    n_train, n_val, n_test = contract.split_sizes(samples)
    rng = np.random.default_rng(seed)
    train = rng.permutation(in_train)[:n_train]
    held_out = in_train + rng.permutation(len(x_all) - in_train)[:n_val + n_test]
    pick = np.concatenate([train, held_out])
    return x_all[pick].astype(np.int32), y_all[pick].astype(np.int32)


def vocabulary_size(dataset: str, data_dir: str) -> int:
    """Token ids of a text data set run from 0 to this minus 1 (padding and unknown included); 0 for images."""
    if dataset not in TEXT_FILES:
        return 0
    with np.load(os.path.join(data_dir, TEXT_FILES[dataset])) as f:
        return int(f["vocabulary_size"])


def load(dataset: str, data_dir: str, samples: int, seed: int) -> tuple[Split, Split, Split]:
    """Draw ``samples`` with ``seed`` and split them 64/16/20 into train, validation and test.

    Every worker calls this with the same arguments and so holds the same split; sharding the training
    part across workers happens once, in the input pipeline.
    """
    if dataset == "synthetic":
        x, y = _synthetic(samples, seed)
    elif dataset in IMAGE_FILES:
        x, y = _images(dataset, os.path.join(data_dir, IMAGE_FILES[dataset]), samples, seed)
    elif dataset in TEXT_FILES:
        x, y = _text(dataset, os.path.join(data_dir, TEXT_FILES[dataset]), samples, seed)
    else:
        raise ValueError(f"unknown dataset {dataset!r}")
    n_train, n_val, _ = contract.split_sizes(samples)
    a, b = n_train, n_train + n_val
    return (x[:a], y[:a]), (x[a:b], y[a:b]), (x[b:], y[b:])
