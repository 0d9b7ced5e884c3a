"""Extra Python packages for users' scripts: `orch build --requirements FILE`, offline like orch's own image.

The host's pip resolves the file (and its dependencies) for the image's interpreter, wheels only, on the host's
one index, pinned to the versions orch's image already has wherever they overlap; the packages the image lacks
are locked with their sha256 in the wheelhouse, downloaded with --require-hashes, checked against that lock at
every build, unpacked on the host (`pip install --target`, no code of theirs runs) and added to orch's trainer
image as one layer. No container reaches the network. The image's tag is named by the file's digest, so `orch up
--requirements FILE` finds the image made from exactly that file.

The file lists packages only: an option of its own (--index-url, --extra-index-url, --find-links, -r, ...) is
refused, since it would add a second source for every package (pip has no index per package), or a file outside
the digest. A mirror is pip's own index-url (PIP_INDEX_URL), which replaces the one index.
"""
from __future__ import annotations

import hashlib
import io
import os
import re
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
from orchestrator.images import pins, wheels
from orchestrator.images.wheels import LOCK_NAME, platform_args, read_lock, redact, verify, wheel_id
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
        raise InvalidSpec(f"--requirements: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if data is None:
        raise InvalidSpec(f"--requirements: {path} does not exist")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSpec(f"requirements: {path} is not UTF-8 text") from None
    for number, line in _lines(text):
        option = next((word for word in line.split() if word.startswith("-") and not word.startswith("--hash")), None)
        if option:
            raise InvalidSpec(f"requirements: {path.name} line {number}: {redact(option.split('=')[0])[:40]} is not "
                              "taken; list packages only (orch takes each from one index, the host's pip index-url)")
    return data


def _lines(text: str) -> list[tuple[int, str]]:
    """The file's requirement lines as pip reads them (continuations joined, comments dropped), each with the
    number of its first line."""
    lines, start, pending = [], 1, ""
    for number, raw in enumerate([*text.splitlines(), ""], 1):
        start, pending = (start if pending else number), pending + raw
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        line, pending = re.sub(r"(^|\s)#.*$", "", pending).strip(), ""
        if line:
            lines.append((start, line))
    return lines


def _urls(text: str) -> list[str]:
    return [url for _, line in _lines(text) for url in re.findall(r"[A-Za-z][A-Za-z0-9+.-]*://\S+", line)]


def check(path: Path, allow_insecure: bool = False) -> bytes:
    """The file's bytes if `orch build --requirements` can take it (read_requirements, and every URL in it https
    unless ``allow_insecure``): checked before anything is built."""
    text = read_requirements(path)
    for url in _urls(text.decode()):
        wheels.check_secure(url, f"requirements: {path.name}", allow_insecure)
    return text


def image_for(requirements: bytes, framework: str = frameworks.DEFAULT) -> str:
    """The tag of the image built from this requirements file's content on ``framework``'s main image."""
    repo = frameworks.get(framework).main_image().rpartition(":")[0]
    return f"{repo}:{__version__}-user-{hashlib.sha256(requirements).hexdigest()[:12]}"


def _recipe(framework: str) -> Path:
    """The recipe (and lock) of the image users' packages go on: ``framework``'s main image's."""
    recipe = frameworks.get(framework).recipe()
    assert recipe is not None
    return recipe


def _constraints(folder: Path, framework: str) -> Path:
    """A constraints file pinning every package of orch's image to its version there (no hashes: pip refuses
    hashes in constraints)."""
    lock = read_lock(_recipe(framework) / LOCK_NAME)
    path = folder / "constraints.txt"
    path.write_text("".join(f"{name}=={p.version}\n" for name, p in sorted(lock.packages.items())))
    return path


def _unpack(files: list[Path], target: Path) -> None:
    """Unpack ``wheels`` into ``target`` as site-packages content, with the host's pip and no resolution."""
    cmd = [sys.executable, "-m", "pip", "install", *platform_args(), "--no-deps", "--no-index", "--no-compile",
           "--target", str(target), "--progress-bar", "off", *map(str, files)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError("pip could not unpack the wheels of the requirements file",
                         details=redact("\n".join(proc.stderr.strip().splitlines()[-8:])))


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


def wheelhouse(text: bytes, name: str, paths: Paths, say: Say, allow_insecure: bool = False,
               framework: str = frameworks.DEFAULT) -> list[Path]:
    """The wheels of the packages ``text`` adds to orch's image, in a wheelhouse with their lock.

    At first: resolved on the host's one index (URLs the file names aside), the packages the image lacks locked
    (version, sha256, source), then downloaded from their own source alone with --require-hashes. Every build
    checks the wheels against that lock."""
    for url in _urls(text.decode()):
        wheels.check_secure(url, f"requirements: {name}", allow_insecure)  # as `check` did, for callers that did not
    installed = read_lock(_recipe(framework) / LOCK_NAME)
    key = hashlib.sha256(text + installed.digest.encode() + RESOLUTION.encode()).hexdigest()[:16]
    folder = paths.wheelhouse / f"user-{key}"
    if (folder / ".complete").is_file():
        if not (folder / LOCK_NAME).is_file():
            return []
        lock = read_lock(folder / LOCK_NAME)
        if not any(CUDA.match(name) for name in lock.packages):  # a wheelhouse of an older orch may hold them
            return verify(folder, lock)
        (folder / ".complete").unlink()
    index, env = wheels.host_index()
    wheels.check_secure(index, "the host's package index (pip's index-url)", allow_insecure)
    say(f"resolving {name} on {redact(index)} (host pip, for CPython 3.11 manylinux, wheels only)")
    with tempfile.TemporaryDirectory(prefix="orch-user-") as scratch:
        listed = Path(scratch) / "requirements.txt"
        listed.write_bytes(text)
        args = [*wheels.index_args(index), "-r", str(listed), "-c", str(_constraints(Path(scratch), framework))]
        with wheels.insecure_allowed(allow_insecure):
            resolution = pins.resolve_graph(args, index, env, name)
    extra = added(resolution, set(installed.packages), name)
    folder.mkdir(parents=True, exist_ok=True)
    found: list[Path] = []
    (folder / LOCK_NAME).unlink(missing_ok=True)  # of an attempt that did not finish
    if extra:
        lock = pins.write_lock(folder / LOCK_NAME, pins.render_pins(extra, [
            f"The packages {name} adds to orch's image, for CPython 3.11 manylinux x86_64, resolved on {index}",
            "(pinned to the image's versions where they overlap) by `orch build --requirements`."]))
        say(f"downloading {len(extra)} wheels (hashes checked)")
        pins.download_pins(folder, extra, [index, *_urls(text.decode())], env, name)
        found = verify(folder, lock)
    (folder / ".complete").write_text("ok\n")
    return found


CUDA = re.compile(r"^(nvidia-.*|triton|cupy-cuda.*)$")  # GPU libraries: of no use on orch's CPU images
# How the packages a file adds are chosen (``added``); part of a wheelhouse's key, so that one resolved another way
# (an earlier orch's, which took every wheel pip resolved) is never reused.
RESOLUTION = "reached-from-requested-v2"


def added(resolution: pins.Resolution, installed: set[str], name: str) -> list[wheels.Locked]:
    """The wheels a requirements file adds to an image that has ``installed``: what its packages need, the image's
    own packages and what those need left out. The image carries what it chose of its packages' dependencies
    (PyTorch's, without the CUDA libraries a CPU never loads), so torchvision adds torchvision, not a second CUDA.
    InvalidSpec, naming the package that brings them, where the file would still add GPU libraries."""
    needed = set(resolution.reached(installed))
    extra = [pin for pin in resolution.pins if pin.name in needed and pin.name not in installed]
    cuda = sorted(pin.name for pin in extra if CUDA.match(pin.name))
    if cuda:
        culprits = [asked for asked, extras in resolution.requested.items()
                    if set(cuda) & set(resolution.reached(installed, {asked: extras}))]
        raise InvalidSpec(f"requirements: {name} would add GPU libraries ({', '.join(cuda[:3])}"
                          f"{', ...' if len(cuda) > 3 else ''}) to orch's CPU image, through "
                          f"{', '.join(culprits) or cuda[0]}; take a CPU build of it, or leave it out")
    return extra


def build(requirements: Path, force: bool = False, engine: Optional[Engine] = None, paths: Optional[Paths] = None,
          say: Optional[Say] = None, allow_insecure: bool = False,
          framework: str = frameworks.DEFAULT) -> tuple[str, bool, float, int]:
    """Build (or find up to date) the image with ``requirements``' packages on ``framework``'s main image; return
    (tag, built, seconds, size).

    orch's own image must exist (`orch build`, or `orch build --framework NAME`): the packages are one layer on top
    of it. Plain-http URLs (the host's index, or a wheel's) are refused unless ``allow_insecure``."""
    engine = engine or Engine()
    paths = paths or default_paths()
    say = say or (lambda _msg: None)
    text = read_requirements(requirements)
    unit = frameworks.get(framework)
    tag, parent = image_for(text, framework), unit.main_image()
    engine.ping()
    engine.require_image(parent, f"run `{unit.build_command()}` first; the packages are added to its image")
    inputs = hashlib.sha256(text + b"\0" + engine.image_id(parent).encode()).hexdigest()
    if not force and (engine.image_labels(tag) or {}).get(LABEL_INPUTS) == inputs:
        say(f"{tag} is up to date")
        return tag, False, 0.0, engine.image_size(tag)
    started = time.monotonic()
    extra = wheelhouse(text, requirements.name, paths, say, allow_insecure, framework)
    names = ", ".join(f"{n}=={v}" for n, v in (wheel_id(w.name) for w in extra)) or "none"
    say(f"adding to {parent}: {names}")
    with tempfile.TemporaryDirectory(prefix="orch-user-") as scratch:
        target = Path(scratch) / "site-packages"
        target.mkdir()
        if extra:
            _unpack(extra, target)
        engine.add_layer(parent, SITE_PACKAGES, _archive(target), tag, {LABEL_INPUTS: inputs, LABEL_KIND: "user"})
    return tag, True, time.monotonic() - started, engine.image_size(tag)
