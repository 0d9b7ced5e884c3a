"""An orch image's Python environment served from a volume on the engine's own disk, not from the image's layers.

A container reads its image through the engine's storage driver. Under fuse-overlayfs (rootless engines, engines
inside containers), every file an import opens crosses FUSE in user space, and TensorFlow's and PyTorch's imports
open thousands. Three containers that each import TensorFlow took 5.06 s with the environment in the image and
3.69 s with it in a volume; PyTorch 3.48 s and 2.40 s (benchmarks/venv_volume.py). So, where every replica runs on
this engine (Compose), a run of an image orch chose mounts a copy of the image's /opt/venv, read-only, over that
folder.

The copy is the engine's own (it fills a new volume with the image's content at that path when a container that
mounts it is created), made once per build of the image: a second, empty volume ``NAME.ok`` labelled with the
image's id is created only after the copy returned, and a run whose image has another id (it was rebuilt) makes
the copy again. The volumes carry the label ``orch.cache=venv``; `docker volume prune --filter label=orch.cache`
removes the unused ones.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from orchestrator.errors import DockerError

if TYPE_CHECKING:
    from orchestrator.docker.engine import Engine

VENV = "/opt/venv"  # the Python environment of every orch image (the recipes' `python3 -m venv`)
LABEL_CACHE = "orch.cache"
LABEL_IMAGE_ID = "orch.image-id"
DONE = ".ok"


def volume_name(image: str) -> str:
    """The volume that holds ``image``'s environment: readable, and unique per image reference."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", image)[:80]
    return f"orch-venv.{readable}.{hashlib.sha256(image.encode()).hexdigest()[:8]}"


def ensure(engine: "Engine", name: str, image: str, lock: Path, say: Callable[[str], None]) -> None:
    """Make volume ``name`` hold ``image``'s environment as the image is now, unless it already does. ``lock`` is a
    folder this user's orch processes lock (flock) while they check and copy, so two runs do not copy at once."""
    lock.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        image_id = engine.image_id(image)
        done = engine.volume_labels(name + DONE)
        if done is not None and done.get(LABEL_IMAGE_ID) == image_id and engine.volume_labels(name) is not None:
            return
        engine.remove_volume(name + DONE)
        try:
            engine.remove_volume(name)
        except DockerError as exc:
            raise DockerError(f"{image} was rebuilt, but a container still uses the copy of its previous {VENV} in "
                              f"volume {name}; let that run end or stop it (`orch down`), then run again",
                              details=str(exc)) from None
        say(f"copying {image}'s Python environment into volume {name}, once per build of the image, so that "
            "its containers start faster")
        started = time.monotonic()
        labels = {LABEL_CACHE: "venv", LABEL_IMAGE_ID: image_id}
        engine.create_volume(name, labels)
        engine.fill_volume(name, image, VENV)
        engine.create_volume(name + DONE, labels)
        say(f"copied in {time.monotonic() - started:.1f} s")
    finally:
        os.close(fd)  # and the lock with it
