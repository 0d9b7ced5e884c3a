"""Data images: the prepared data set inside an image, for engines whose nodes share no folder with this host.

On Compose the data set is a host folder mounted read-only. A Swarm node, or a Kubernetes pod, has no such
folder, but it has images: they come from a registry the user names, or are copied to each node with
`orch push`. So orch adds the prepared files (verified by sha256 when they were prepared) as one layer at
``contract.IMAGE_DATA_DIR``:

- on top of the trainer image (``with_data``), for Swarm, whose services cannot copy anything in first;
- on top of orch's base image (``data_image``), for Kubernetes, whose init container copies them into the pod.

Each is rebuilt when its base image or the data changes (the label ``orch.inputs`` holds their digest).
"""
from __future__ import annotations

import hashlib
import io
import tarfile
import time
from pathlib import Path
from typing import Callable, Optional

from orchestrator import __version__, contract
from orchestrator.docker.engine import Engine
from orchestrator.labels import LABEL_INPUTS, LABEL_KIND
from orchestrator.paths import Paths, default_paths

Say = Callable[[str], None]
DATA_REPO = "orch-data"
NEEDS_NO_DATA = ("synthetic",)  # made in the trainer


def with_data(image: str, dataset: str) -> str:
    """The tag of ``image`` with ``dataset``'s files added: beside orch's own tags, or under orch-data for an
    image of the user's (named by a digest of its reference)."""
    repository, _, tag = image.rpartition(":")
    if repository.startswith("orch-trainer") and "/" not in repository:
        return f"{repository}:{tag}-{dataset}"
    return f"{DATA_REPO}:{__version__}-{dataset}-on-{hashlib.sha256(image.encode()).hexdigest()[:12]}"


def data_image(dataset: str) -> str:
    """The tag of the data-only image of ``dataset`` (orch's base image with the files), for init containers."""
    return f"{DATA_REPO}:{__version__}-{dataset}"


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink() and not p.name.startswith("."))


def _archive(folder: Path) -> bytes:
    """The data set's files under IMAGE_DATA_DIR's name, readable by any container user, with fixed times."""
    top = contract.IMAGE_DATA_DIR.strip("/")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(top)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
        tar.addfile(info)
        for path in _files(folder):
            data = path.read_bytes()
            info = tarfile.TarInfo(f"{top}/{path.name}")
            info.mode, info.size, info.mtime = 0o444, len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def ensure(engine: Engine, base: str, tag: str, data_dir: Path, say: Optional[Say] = None) -> bool:
    """Make ``tag``: ``base`` plus the files of ``data_dir`` at IMAGE_DATA_DIR, unless it is up to date.
    Returns whether it was built. The base image must exist."""
    say = say or (lambda _msg: None)
    digest = hashlib.sha256(f"{engine.image_id(base)}\0".encode())
    for path in _files(data_dir):
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return layer(engine, base, tag, digest.hexdigest(), lambda: _archive(data_dir), "data",
                 f"the {data_dir.name} data set", say)


def layer(engine: Engine, base: str, tag: str, inputs: str, archive: Callable[[], bytes], kind: str, what: str,
          say: Optional[Say] = None) -> bool:
    """Make ``tag``: ``base`` plus ``archive()`` unpacked at /, unless ``tag`` was made from the same ``inputs`` (a
    digest of everything it is made from, kept in its label); the image it replaces is removed if unused.
    Returns whether it was built."""
    if (engine.image_labels(tag) or {}).get(LABEL_INPUTS) == inputs:
        return False
    (say or (lambda _msg: None))(f"building {tag}: {what} on {base}")
    previous = (engine.image_labels(tag) is not None) and engine.image_id(tag)
    engine.add_layer(base, "/", archive(), tag, {LABEL_INPUTS: inputs, LABEL_KIND: kind})
    if previous and previous != engine.image_id(tag):
        engine.remove_image_if_unused(previous)
    return True


def build_all(names: list[str], base_image: str, engine: Optional[Engine] = None, paths: Optional[Paths] = None,
              say: Optional[Say] = None) -> list[tuple[str, bool, float, int]]:
    """`orch build --data`: for each data set, the trainer image with it (Swarm) and its data-only image on
    ``base_image`` (Kubernetes); (tag, built, seconds, size) of each."""
    from orchestrator import frameworks
    from orchestrator.data import prepare as datasets

    engine = engine or Engine()
    paths = paths or default_paths()
    say = say or (lambda _msg: None)
    out = []
    for name in names:
        datasets.prepare(paths.data, name, say)
        trainer = frameworks.get(frameworks.DEFAULT).main_image()
        for base, tag in ((trainer, with_data(trainer, name)), (base_image, data_image(name))):
            engine.require_image(base, "run `orch build` first")
            started = time.monotonic()
            built = ensure(engine, base, tag, datasets.dataset_dir(paths.data, name), say)
            out.append((tag, built, time.monotonic() - started, engine.image_size(tag)))
    return out
