"""Script images: a user's script's snapshot as one thin layer, for engines whose nodes see no folder of this host.

On Compose (and so on one Swarm node's folders) the snapshot orch makes of a --script's folder when the run starts
(``runs/<id>/source/``) is mounted read-only at ``contract.SCRIPT_MOUNT``. A Swarm of several nodes or a Kubernetes
cluster cannot see that folder; they get the snapshot the way they get the data set (images/data.py): as one layer,
here on top of the run's image, at the same path, files read-only. The image is the run's own, tagged by its run id
(``orch-script:<run id>``), since the snapshot is the run's: it is made when the run starts, from the snapshot the
run records (its sha256 is in run.json). Nodes that cannot see this engine's images pull it from ``--registry``,
where orch pushes it.
"""
from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from orchestrator import contract
from orchestrator.data.loaders import KERAS_DIR, TORCHVISION_DIR
from orchestrator.data.prepare import LOADERS, SOURCE_FILE
from orchestrator.docker.engine import Engine
from orchestrator.images import data as data_images
from orchestrator.labels import LABEL_KIND, LABEL_RUN

if TYPE_CHECKING:
    from orchestrator.plan.model import Plan

Say = Callable[[str], None]
SCRIPT_REPO = "orch-script"
LOADERS_LAYOUT = "2"  # the loaders layer's own layout: a change here rebuilds the layers made before it


def loaders_image(image: str) -> str:
    """The tag of ``image`` with the frameworks' data caches (data/loaders.py) at IMAGE_LOADERS_DIR."""
    return data_images.with_data(image, LOADERS)


def script_image(run_id: str) -> str:
    """The tag of run ``run_id``'s script image."""
    return f"{SCRIPT_REPO}:{run_id}"


def archive(folder: Path, top: str = contract.SCRIPT_MOUNT, parts: Optional[tuple[str, ...]] = None,
            links: tuple[tuple[str, str], ...] = ()) -> bytes:
    """The files under ``folder`` (or only its subfolders ``parts``) at the image path ``top``: folders 0755 and
    files 0444 or 0555 (readable by any container user, written by none), times fixed. A snapshot holds regular
    files and folders only (run/scripts.py); anything else found there is left out. ``links`` adds symbolic links
    (path in the image, target)."""
    top = top.strip("/")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        def add(name: str, mode: int, data: Optional[bytes] = None) -> None:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE if data is None else tarfile.REGTYPE
            info.mode, info.mtime, info.size = mode, 0, len(data or b"")
            tar.addfile(info, None if data is None else io.BytesIO(data))

        def folders(path: str) -> None:  # ``path`` and the folders above it
            for depth in range(1, path.count("/") + 2):
                add("/".join(path.split("/")[:depth]), 0o755)

        folders(top)
        roots = [folder / part for part in parts] if parts is not None else [folder]
        for root in roots:
            for path in sorted([root, *root.rglob("*")] if root != folder else root.rglob("*")):
                if path.is_symlink():
                    continue
                name = f"{top}/{path.relative_to(folder).as_posix()}"
                if path.is_dir():
                    add(name, 0o755)
                elif path.is_file():
                    add(name, 0o555 if path.stat().st_mode & 0o111 else 0o444, path.read_bytes())
        for link, target in links:
            folders(link.strip("/").rpartition("/")[0])
            info = tarfile.TarInfo(link.strip("/"))
            info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, target, 0o777, 0
            tar.addfile(info)
    return buffer.getvalue()


def ensure_loaders(engine: Engine, base: str, tag: str, folder: Path, say: Optional[Say] = None) -> bool:
    """Make ``tag``: ``base`` plus the frameworks' caches prepared in ``folder``, unless it is up to date (its label
    holds a digest of the base and of the caches' record, which names every file's sha256, checked before each
    run). Returns whether it was built."""
    import hashlib

    record = folder / SOURCE_FILE  # absent where the caches could not be made: the layer is then empty
    inputs = hashlib.sha256(f"{engine.image_id(base)}\0{LOADERS_LAYOUT}\0".encode()
                            + (record.read_bytes() if record.is_file() else b"none")).hexdigest()
    # torchvision's "../data" from a script's own folder: where /orch/run is the image's (Swarm); on Kubernetes it
    # is a writable emptyDir, and the script's interpreter makes the link (orch_trainer/loaders.py).
    data = (f"{contract.OUT_MOUNT}/{contract.TORCHVISION_ROOT}", f"{contract.IMAGE_LOADERS_DIR}/{TORCHVISION_DIR}")
    return data_images.layer(
        engine, base, tag, inputs,
        lambda: archive(folder, contract.IMAGE_LOADERS_DIR, (KERAS_DIR, TORCHVISION_DIR), (data,)), "loaders",
        "Keras' and torchvision's data caches", say)


def build(engine: Engine, base: str, run_id: str, folder: Path, say: Optional[Say] = None) -> str:
    """Make run ``run_id``'s script image: ``base`` plus the snapshot in ``folder`` at SCRIPT_MOUNT; its tag."""
    tag = script_image(run_id)
    (say or (lambda _msg: None))(f"adding the script's copy to {base} as {tag}")
    engine.add_layer(base, "/", archive(folder), tag, {LABEL_KIND: "script", LABEL_RUN: run_id})
    return tag


def stage(engine: Engine, plan: "Plan", snapshot: Path, say: Optional[Say] = None) -> None:
    """Make ``plan``'s script image from the run's ``snapshot``: the frameworks' caches on the image the run runs
    (``plan.loaders_on``, made once), then the snapshot on that; with ``--registry`` push it there for the nodes."""
    say = say or (lambda _msg: None)
    if not plan.script_on:
        return
    engine.require_image(plan.loaders_on, plan.build_hint if plan.loaders_on == plan.base_image
                         else f"build it first (`orch build --data {plan.spec.dataset}`)")
    if plan.loaders_dir is not None:
        ensure_loaders(engine, plan.loaders_on, plan.script_on, plan.loaders_dir, say)
    tag = build(engine, plan.script_on, plan.spec.run_id, snapshot, say)
    registry = plan.spec.backend_options.image_registry()
    if registry:
        say(f"pushing {tag} to {registry}")
        engine.push_image(tag, f"{registry}/{tag}")
