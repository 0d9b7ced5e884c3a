"""An orch image's Python environment served from a volume on the engine's own disk, not from the image's layers.

A container reads its image through the engine's storage driver. Under fuse-overlayfs (rootless engines, engines
inside containers), every file an import opens crosses FUSE in user space, and TensorFlow's and PyTorch's imports
open thousands. Three containers that each import TensorFlow took 4.92 s with the environment in the image's
layers and 3.55 s with it in a volume; PyTorch 3.68 s and 2.71 s
(benchmarks/investigations/results/venv_volume.md). So, where every replica runs on this engine (Compose), a run
of an image orch chose mounts a copy of the image's /opt/venv, read-only, over that folder.

The copy is the engine's own (it fills a new volume with the image's content at that path when a container that
mounts it is created), made from the image's id once per build: a second, empty volume ``NAME.ok`` labelled with
that id is created only after the copy returned, and a run whose image has another id (it was rebuilt), or whose
copy has no mark (it was interrupted), makes the copy again. A copy a container still uses is never replaced. The
runner stages again before a whole-group restart, so restarted replicas get the copy of the image they run. The
volumes carry the label ``orch.cache=venv``.
"""
from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from orchestrator.errors import DockerError
from orchestrator.safeio import waiting_for

if TYPE_CHECKING:
    from orchestrator.docker.engine import Engine

VENV = "/opt/venv"  # the Python environment of every orch image (the recipes' `python3 -m venv`)
LABEL_CACHE = "orch.cache"
LABEL_IMAGE_ID = "orch.image-id"
LABEL_IMAGE = "orch.image"
DONE = ".ok"  # the empty volume that marks a whole copy
COPY = ".copy"  # the helper container the engine fills the volume through


def volume_name(image: str) -> str:
    """The volume that holds ``image``'s environment: readable, and unique per image reference."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", image)[:80]
    return f"orch-venv.{readable}.{hashlib.sha256(image.encode()).hexdigest()[:8]}"


def ensure(engine: "Engine", name: str, image: str, lock: Path, say: Callable[[str], None]) -> None:
    """Make volume ``name`` hold ``image``'s environment as the image is now, unless it already does. ``lock`` is a
    folder this user's orch processes lock (flock) while they check and copy, so two runs do not copy at once."""
    with waiting_for(lock):
        image_id = engine.image_id(image)
        done = engine.volume_labels(name + DONE)
        if done is not None and done.get(LABEL_IMAGE_ID) == image_id and engine.volume_labels(name) is not None:
            return
        # The engine goes on copying after its client is gone: the helper of an interrupted copy may exist, and
        # hold the volume, without ever having been seen by the orch that made it.
        engine.remove_container(name + COPY)
        try:
            engine.remove_volume(name)
        except DockerError as exc:
            rebuilt = done is not None and done.get(LABEL_IMAGE_ID) != image_id
            cause = (f"{image} was rebuilt, but a container still uses the copy of its previous build in volume "
                     f"{name}" if rebuilt else f"a container uses volume {name}, whose copy of {image}'s Python "
                     "environment orch never saw complete")
            raise DockerError(f"{cause}; let that run end or stop it (`orch down`), then run again",
                              details=str(exc)) from None
        engine.remove_volume(name + DONE)
        say(f"copying {image}'s Python environment into volume {name}, once per build of the image, so that "
            "its containers start faster")
        started = time.monotonic()
        labels = {LABEL_CACHE: "venv", LABEL_IMAGE_ID: image_id, LABEL_IMAGE: image}
        engine.create_volume(name, labels)
        engine.fill_volume(name, image_id, VENV, helper=name + COPY, labels={LABEL_CACHE: "venv-copy"})
        engine.create_volume(name + DONE, labels)
        say(f"copied in {time.monotonic() - started:.1f} s")
