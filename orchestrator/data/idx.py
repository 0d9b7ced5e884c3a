"""Fashion-MNIST from Debian's package ``dataset-fashion-mnist``: IDX files, checked, decoded with NumPy.

The package holds Zalando's four IDX files, gzipped: 60,000 training and 10,000 test images of 28 x 28
uint8 pixels, and their labels (0-9, 6,000 and 1,000 of each class). orch keeps all 70,000, training
images first: the trainer draws its own samples and splits them 64/16/20, as for MNIST.
"""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from orchestrator import contract
from orchestrator.data.fetch import apt_deb, check_sha256, deb_members, file_sha256
from orchestrator.errors import DataError

PACKAGE = "dataset-fashion-mnist"
VERSION = "0.0~git20200523.55506a9-1"  # Debian bookworm; the IDX files are checked below whatever the .deb
DEB_DIR = "usr/share/datasets/fashion-mnist"  # the files' folder inside the package
INSTALLED_DIR = Path("/") / DEB_DIR  # and on a host that has the package installed

# The four files, their sha256 and the dimensions each must declare.
FILES = {
    "train-images": ("train-images-idx3-ubyte.gz",
                     "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7", (60_000, 28, 28)),
    "train-labels": ("train-labels-idx1-ubyte.gz",
                     "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056", (60_000,)),
    "test-images": ("t10k-images-idx3-ubyte.gz",
                    "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa", (10_000, 28, 28)),
    "test-labels": ("t10k-labels-idx1-ubyte.gz",
                    "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05", (10_000,)),
}

IDX_UBYTE = 0x08  # the only element type orch reads: unsigned bytes
MAX_IDX_BYTES = 64 << 20  # no IDX file orch reads is larger once decompressed

Say = Callable[[str], None]


def parse_idx(raw: bytes, expect_dims: Optional[tuple[int, ...]] = None, what: str = "IDX file") -> Any:
    """Decode an (uncompressed) IDX file of unsigned bytes into an array of its declared shape.

    The header is checked before anything is read: two zero bytes, type 0x08 (ubyte), a rank of 1 to 4,
    every dimension positive, and a body of exactly the declared size. ``expect_dims`` pins the shape.
    """
    import numpy as np

    if len(raw) < 4:
        raise DataError(f"{what} is too short for an IDX header ({len(raw)} bytes)")
    if raw[0] != 0 or raw[1] != 0:
        raise DataError(f"{what} is not an IDX file (magic {raw[:4].hex()})")
    if raw[2] != IDX_UBYTE:
        raise DataError(f"{what} holds IDX type 0x{raw[2]:02x}; only unsigned bytes (0x08) are read")
    rank = raw[3]
    if not 1 <= rank <= 4:
        raise DataError(f"{what} declares {rank} dimensions; expected 1 to 4")
    header = 4 + 4 * rank
    if len(raw) < header:
        raise DataError(f"{what} is truncated inside its header")
    dims = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(rank))
    if any(d <= 0 for d in dims):
        raise DataError(f"{what} declares an empty dimension {dims}")
    if expect_dims is not None and dims != tuple(expect_dims):
        raise DataError(f"{what} declares shape {dims}, expected {tuple(expect_dims)}")
    size = 1
    for d in dims:
        size *= d
    if len(raw) - header != size:
        raise DataError(f"{what} has {len(raw) - header} bytes of data, its header declares {size}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def gunzip(raw: bytes, what: str, limit: int = MAX_IDX_BYTES) -> bytes:
    """Decompress a gzip file, refusing one that grows past ``limit`` bytes."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise DataError(f"{what} is not valid gzip: {exc}") from None
    if len(out) > limit:
        raise DataError(f"{what} decompresses to more than {limit} bytes")
    if not inflater.eof:
        raise DataError(f"{what} is a truncated gzip stream")
    return out


def check_files(files: Mapping[str, bytes], expected: Optional[Mapping[str, str]] = None) -> None:
    """Check the four gzipped IDX files (key -> bytes) against their pinned sha256 (``expected`` overrides some,
    key -> sha256); DataError naming the first that differs."""
    for key, (name, sha, _dims) in FILES.items():
        check_sha256(f"Fashion-MNIST file {name}", files[key], (expected or {}).get(key, sha))


def fashion_from_idx(files: Mapping[str, bytes], expected: Optional[Mapping[str, str]] = None) -> tuple[Any, Any]:
    """Verify the four gzipped IDX files (key -> bytes) by sha256, then decode them into (x [70000, 784], y).

    ``expected`` overrides the pinned sha256 of some files (key -> sha256).
    """
    import numpy as np

    check_files(files, expected)
    arrays = {key: parse_idx(gunzip(files[key], name), dims, name) for key, (name, _sha, dims) in FILES.items()}
    x = np.concatenate([arrays["train-images"], arrays["test-images"]]).reshape(-1, 28 * 28)
    y = np.concatenate([arrays["train-labels"], arrays["test-labels"]])
    if int(y.max()) > 9:
        raise DataError(f"Fashion-MNIST labels run up to {int(y.max())}; expected 0-9")
    return np.ascontiguousarray(x, dtype=np.uint8), y.astype(np.uint8)


def _read_files(source: Path) -> dict[str, bytes]:
    if source.is_dir():
        try:
            return {key: (source / name).read_bytes() for key, (name, _sha, _dims) in FILES.items()}
        except OSError as exc:
            raise DataError(f"cannot read Fashion-MNIST from {source}: {exc}") from None
    return deb_members(source, {key: f"{DEB_DIR}/{name}" for key, (name, _sha, _dims) in FILES.items()})


def read_files(work: Path, say: Say, source: Optional[Path]) -> tuple[dict[str, bytes], dict[str, Any]]:
    """The four gzipped IDX files (key -> bytes, not yet checked: ``check_files``) and what to record about
    where they came from. ``source`` may name the package's .deb or a folder with the four files; without it
    the files of an installed package are used, or else the package is fetched with ``apt-get download``."""
    record: dict[str, Any] = {"package": f"{PACKAGE}={VERSION}",
                              "idx_sha256": {FILES[k][0]: FILES[k][1] for k in FILES}}
    record["from"] = "a local copy"
    if source is None and all((INSTALLED_DIR / name).is_file() for name, _sha, _dims in FILES.values()):
        source, record["from"] = INSTALLED_DIR, f"the installed package ({INSTALLED_DIR})"
    if source is None:
        say(f"downloading Fashion-MNIST ({PACKAGE}={VERSION}) with the host's apt-get")
        source, record["from"] = apt_deb(PACKAGE, VERSION, work), "apt-get download"
    if source.is_file():
        record["deb_sha256"] = file_sha256(source)
    return _read_files(source), record


def make(out: Path, work: Path, say: Say, source: Optional[Path]) -> dict[str, Any]:
    """Prepare Fashion-MNIST into ``out`` and return what to record about its source (see ``read_files``)."""
    import numpy as np

    files, record = read_files(work, say, source)
    say("verifying and converting Fashion-MNIST")
    x, y = fashion_from_idx(files)
    np.savez(out / contract.FASHION_MNIST_FILE, x=x, y=y)
    return record
