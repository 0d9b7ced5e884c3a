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
from orchestrator.docker.engine import Engine
from orchestrator.labels import LABEL_KIND, LABEL_RUN

if TYPE_CHECKING:
    from orchestrator.plan.model import Plan

Say = Callable[[str], None]
SCRIPT_REPO = "orch-script"


def script_image(run_id: str) -> str:
    """The tag of run ``run_id``'s script image."""
    return f"{SCRIPT_REPO}:{run_id}"


def archive(folder: Path) -> bytes:
    """The snapshot in ``folder`` under SCRIPT_MOUNT's name: folders 0755 and files 0444 or 0555 (readable by any container
    user, written by none), times fixed. The snapshot holds regular files and folders only (run/scripts.py); anything
    else found there is left out."""
    top = contract.SCRIPT_MOUNT.strip("/")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        def add(name: str, mode: int, data: Optional[bytes] = None) -> None:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE if data is None else tarfile.REGTYPE
            info.mode, info.mtime, info.size = mode, 0, len(data or b"")
            tar.addfile(info, None if data is None else io.BytesIO(data))

        for parent in ("orch", top):
            add(parent, 0o755)
        for path in sorted(folder.rglob("*")):
            if path.is_symlink():
                continue
            name = f"{top}/{path.relative_to(folder).as_posix()}"
            if path.is_dir():
                add(name, 0o755)
            elif path.is_file():
                add(name, 0o555 if path.stat().st_mode & 0o111 else 0o444, path.read_bytes())
    return buffer.getvalue()


def build(engine: Engine, base: str, run_id: str, folder: Path, say: Optional[Say] = None) -> str:
    """Make run ``run_id``'s script image: ``base`` plus the snapshot in ``folder`` at SCRIPT_MOUNT; its tag."""
    tag = script_image(run_id)
    (say or (lambda _msg: None))(f"adding the script's copy to {base} as {tag}")
    engine.add_layer(base, "/", archive(folder), tag, {LABEL_KIND: "script", LABEL_RUN: run_id})
    return tag


def stage(engine: Engine, plan: "Plan", snapshot: Path, say: Optional[Say] = None) -> None:
    """Make ``plan``'s script image from the run's ``snapshot`` on the image it runs (``plan.script_on``), and with
    ``--registry`` push it there for the nodes to pull."""
    say = say or (lambda _msg: None)
    if not plan.script_on:
        return
    engine.require_image(plan.script_on, plan.build_hint if plan.script_on == plan.base_image
                         else f"build it first (`orch build --data {plan.spec.dataset}`)")
    tag = build(engine, plan.script_on, plan.spec.run_id, snapshot, say)
    registry = plan.spec.backend_options.image_registry()
    if registry:
        say(f"pushing {tag} to {registry}")
        engine.push_image(tag, f"{registry}/{tag}")
