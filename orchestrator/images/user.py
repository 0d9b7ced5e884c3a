"""Extra Python packages for users' scripts: `orch build --requirements FILE`, offline like orch's own image.

The host's pip downloads the file's wheels (and their dependencies) for the image's interpreter, pinned to
the versions orch's image already has wherever they overlap; the packages the image lacks are unpacked on
the host (`pip install --target`, no code of theirs runs) and added to orch's trainer image as one layer.
No container reaches the network. The image's tag is named by the file's digest, so `orch up
--requirements FILE` finds the image made from exactly that file.
"""
from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from orchestrator import __version__, frameworks
from orchestrator.docker.engine import Engine
from orchestrator.errors import BuildError, InvalidSpec
from orchestrator.images.wheels import LOCK_NAME, download, platform_args, read_lock, wheel_id
from orchestrator.labels import LABEL_INPUTS, LABEL_KIND
from orchestrator.paths import Paths, default_paths
from orchestrator.safeio import Unsafe, read_bounded

MAX_BYTES = 64 * 1024  # a requirements file is a few lines
SITE_PACKAGES = "/opt/venv/lib/python3.11/site-packages"
Say = Callable[[str], None]


def read_requirements(path: Path) -> bytes:
    """The file's bytes: bounded, a regular file, UTF-8; InvalidSpec (one line) otherwise."""
    try:
        data = read_bounded(Path(os.path.realpath(path)), MAX_BYTES)
    except (Unsafe, OSError) as exc:
        raise InvalidSpec(f"requirements: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if data is None:
        raise InvalidSpec(f"requirements: {path} does not exist")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSpec(f"requirements: {path} is not UTF-8 text") from None
    return data


def image_for(requirements: bytes) -> str:
    """The tag of the image built from this requirements file's content."""
    repo = frameworks.get(frameworks.DEFAULT).main_image().rpartition(":")[0]
    return f"{repo}:{__version__}-user-{hashlib.sha256(requirements).hexdigest()[:12]}"


def _recipe() -> Path:
    """The recipe of the image users' packages go on: the default framework's, which takes them."""
    recipe = frameworks.get(frameworks.DEFAULT).recipe()
    assert recipe is not None
    return recipe


def _constraints(folder: Path) -> Path:
    """A constraints file pinning every package of orch's image to its version there (no hashes: pip refuses
    hashes in constraints)."""
    lock = read_lock(_recipe() / LOCK_NAME)
    path = folder / "constraints.txt"
    path.write_text("".join(f"{name}=={p.version}\n" for name, p in sorted(lock.packages.items())))
    return path


def _unpack(wheels: list[Path], target: Path) -> None:
    """Unpack ``wheels`` into ``target`` as site-packages content, with the host's pip and no resolution."""
    cmd = [sys.executable, "-m", "pip", "install", *platform_args(), "--no-deps", "--no-index", "--no-compile",
           "--target", str(target), "--progress-bar", "off", *map(str, wheels)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError("pip could not unpack the wheels of the requirements file",
                         details="\n".join(proc.stderr.strip().splitlines()[-8:]))


def _archive(folder: Path) -> bytes:
    """``folder``'s tree as a tar, readable by any container user, with no links and fixed times."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                continue
            info = tarfile.TarInfo(path.relative_to(folder).as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                data = path.read_bytes()
                info.mode, info.size = 0o644, len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def build(requirements: Path, force: bool = False, engine: Optional[Engine] = None, paths: Optional[Paths] = None,
          say: Optional[Say] = None) -> tuple[str, bool, float, int]:
    """Build (or find up to date) the image with ``requirements``' packages; return (tag, built, seconds, size).

    orch's own trainer image must exist (`orch build`): the packages are one layer on top of it."""
    engine = engine or Engine()
    paths = paths or default_paths()
    say = say or (lambda _msg: None)
    text = read_requirements(requirements)
    tag, parent = image_for(text), frameworks.get(frameworks.DEFAULT).main_image()
    engine.ping()
    engine.require_image(parent, "run `orch build` first; the packages are added to orch's trainer image")
    inputs = hashlib.sha256(text + b"\0" + engine.image_id(parent).encode()).hexdigest()
    if not force and (engine.image_labels(tag) or {}).get(LABEL_INPUTS) == inputs:
        say(f"{tag} is up to date")
        return tag, False, 0.0, engine.image_size(tag)
    started = time.monotonic()
    installed = read_lock(_recipe() / LOCK_NAME).packages
    with tempfile.TemporaryDirectory(prefix="orch-user-") as scratch:
        scratch_path = Path(scratch)
        wheels_dir = paths.wheelhouse / f"user-{tag.rpartition('-')[2]}"
        wheels_dir.mkdir(parents=True, exist_ok=True)
        (scratch_path / "requirements.txt").write_bytes(text)
        say(f"downloading the wheels of {requirements.name} (host pip, for CPython 3.11 manylinux)")
        download(wheels_dir, ["-r", str(scratch_path / "requirements.txt"), "-c", str(_constraints(scratch_path))],
                 requirements.name)
        extra = [w for w in sorted(wheels_dir.glob("*.whl")) if wheel_id(w.name)[0] not in installed]
        names = ", ".join(f"{n}=={v}" for n, v in (wheel_id(w.name) for w in extra)) or "none"
        say(f"adding to {parent}: {names}")
        target = scratch_path / "site-packages"
        target.mkdir()
        if extra:
            _unpack(extra, target)
        engine.add_layer(parent, SITE_PACKAGES, _archive(target), tag, {LABEL_INPUTS: inputs, LABEL_KIND: "user"})
    return tag, True, time.monotonic() - started, engine.image_size(tag)
