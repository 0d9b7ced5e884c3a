"""A worker's predictions.npz, read as what it is: a container's file, bounded and checked before numpy or zipfile
allocate anything (``read_predictions``)."""
from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Optional

import numpy as np

from orchestrator.safeio import Unsafe, read_bounded

PREDICTIONS_LIMIT = 8 << 20  # bytes of a predictions.npz; the trainer's is about 20 KB
MEMBER_LIMIT = 1 << 20  # bytes of one array in it, unpacked
MAX_PREDICTIONS = 100  # images in it


def _array(raw: bytes, name: str) -> np.ndarray:
    """The array in .npy bytes, its header checked before numpy allocates anything: x is uint8 [k, 784],
    y_true and y_pred are integers [k], 1 <= k <= MAX_PREDICTIONS."""
    f = io.BytesIO(raw)
    version = np.lib.format.read_magic(f)
    if version not in ((1, 0), (2, 0)):
        raise Unsafe(f"{name} is a .npy of version {version}")
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read_header(f)
    if name == "x":
        sane, want = dtype == np.uint8 and len(shape) == 2 and shape[1] == 784, "uint8 [k, 784]"
    else:
        sane, want = dtype.kind in "iu" and len(shape) == 1, "integers [k]"
    if not sane or not 1 <= shape[0] <= MAX_PREDICTIONS:
        raise Unsafe(f"{name} is {dtype.str[:20]} {str(list(shape))[:40]}, not {want}, k from 1 to {MAX_PREDICTIONS}")
    loaded: np.ndarray = np.load(io.BytesIO(raw), allow_pickle=False)
    return loaded


def read_predictions(path: Path) -> Optional[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """x, y_true and y_pred of a worker's predictions.npz (``_array``), or None if it wrote none.

    The file is a container's: Unsafe (one line) if it is a link or FIFO, over PREDICTIONS_LIMIT, unpacks to
    more than MEMBER_LIMIT per array (a zip bomb), is truncated, pickled, or of other arrays or shapes."""
    try:
        data = read_bounded(path, PREDICTIONS_LIMIT)
        if data is None:
            return None
        arrays = {}
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            if sorted(m.filename for m in members) != ["x.npy", "y_pred.npy", "y_true.npy"]:
                raise Unsafe(f"{path.name} holds other arrays than x, y_true and y_pred")
            for member in members:
                if member.file_size > MEMBER_LIMIT:
                    raise Unsafe(f"{member.filename} unpacks to {member.file_size} bytes")
                with archive.open(member) as f:
                    raw = f.read(MEMBER_LIMIT + 1)  # whatever the header claims
                if len(raw) > MEMBER_LIMIT:
                    raise Unsafe(f"{member.filename} unpacks to more than {MEMBER_LIMIT} bytes")
                arrays[member.filename[:-4]] = _array(raw, member.filename[:-4])
    except Unsafe:
        raise
    except Exception as exc:  # noqa: BLE001 - a hostile archive can fail in any of zipfile's, zlib's or numpy's ways
        raise Unsafe(f"{path.name} is not a readable .npz ({type(exc).__name__})") from None
    if not len(arrays["x"]) == len(arrays["y_true"]) == len(arrays["y_pred"]):
        raise Unsafe(f"{path.name} holds arrays of different lengths")
    return arrays["x"], arrays["y_true"], arrays["y_pred"]
