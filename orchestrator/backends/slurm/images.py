"""orch's image where a Slurm cluster's nodes run it: made here, once per image id, on the shared storage.

- charliecloud: the image's files as a folder (``docker export``, unpacked), with the image's environment in
  ``ch/environment`` (which ch-run reads with --set-env) and every folder the replicas mount made in it (ch-run binds
  only onto folders the image has, and runs it read-only);
- docker: the image as an archive (``docker save``), which the first task on each node loads (task.sh).

Each is made under a name with the image's id, and ``batch.image_path`` is a link to it: a job that started on an
older build keeps its own files, and a new one finds the new build.
"""
from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from orchestrator.backends.slurm.batch import image_path
from orchestrator.errors import DockerError
from orchestrator.safeio import waiting_for

if TYPE_CHECKING:
    from orchestrator.docker.engine import Engine

ENV_FILE = "ch/environment"


def _unpack(tar: Path, into: Path) -> None:
    """The image's files: regular files, folders and links, never a device or a path out of ``into``."""
    with tarfile.open(tar) as archive:
        members = [m for m in archive if not (m.ischr() or m.isblk() or m.isfifo())]
        archive.extractall(into, members=members, filter="tar")


def _link(link: Path, target: Path) -> None:
    """Point ``link`` at ``target`` (a name in the same folder), replacing what it pointed at in one step."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target.name)
    os.replace(tmp, link)


def ensure(engine: "Engine", image: str, runtime: str, cache: Path, mount_points: Iterable[str],
           say: Callable[[str], None]) -> Path:
    """What the nodes run of ``image`` under ``runtime``, made where it is missing for the image's current id; the
    link the batch script names."""
    link = Path(image_path(cache, image, runtime))
    image_id = engine.image_id(image)
    built = link.with_name(f"{link.name.removesuffix('.tar')}@{image_id.split(':')[-1][:12]}"
                           + (".tar" if runtime == "docker" else ""))
    # One orch at a time makes an image's files (the others wait, then find them made); a made one is never
    # replaced, since a running job may be reading it.
    with waiting_for(link.parent):
        if runtime == "docker":
            if not built.is_file():
                say(f"saving {image} to {built} for the nodes (once per build; each node loads it once)")
                with tempfile.TemporaryDirectory(prefix=".orch-save-", dir=link.parent) as scratch:
                    tar = Path(scratch) / "image.tar"
                    engine.save_image(image, tar)
                    os.replace(tar, built)
            id_file = built.with_name(built.name + ".id")
            id_file.write_text(image_id + "\n")
            _link(link.with_name(link.name + ".id"), id_file)
            _link(link, built)
            return link
        if not (built / ENV_FILE).is_file():
            say(f"unpacking {image} into {built} for charliecloud (once per build)")
            with tempfile.TemporaryDirectory(prefix=".orch-export-", dir=link.parent) as scratch:
                tar, tree = Path(scratch) / "image.tar", Path(scratch) / "tree"
                engine.export_image(image, tar)
                tree.mkdir()
                try:
                    _unpack(tar, tree)
                except (tarfile.TarError, OSError) as exc:
                    raise DockerError(f"unpacking {image} for charliecloud failed: {exc}") from None
                tar.unlink()
                env = [line for line in engine.image_config(image).get("Env") or [] if "\n" not in line]
                (tree / "ch").mkdir(exist_ok=True)
                (tree / ENV_FILE).write_text("".join(f"{line}\n" for line in env))
                if built.exists():  # a half-made one (no environment file yet): no job can have run it
                    shutil.rmtree(built)
                os.replace(tree, built)
        for point in mount_points:  # ch-run binds onto folders the image has
            (built / point.lstrip("/")).mkdir(parents=True, exist_ok=True)
        (built / "etc" / "hosts").touch()  # and onto a file: each task's hosts file (task.sh)
        _link(link, built)
        return link
