"""The images' wheelhouse: the lock (every wheel's name, version and sha256), its download and its checks.

`images/requirements.lock` is the whole closure of `requirements.txt` (with dependencies) and
`requirements-nodeps.txt` (without), resolved for the image's interpreter: the host's pip downloads
exactly it with --require-hashes, `orch build` checks every wheel against it before use, and the image
installs exactly it with --require-hashes --no-deps. `make lock` (`python -m orchestrator.images.lock`) regenerates it.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from orchestrator.errors import BuildError

LOCK_NAME = "requirements.lock"
REQUIREMENTS = ("requirements.txt", "requirements-nodeps.txt")  # the second without dependencies
REFRESH = "regenerate the lock with `make lock` (python -m orchestrator.images.lock) and review its diff"
# The image's interpreter: Debian bookworm's python3 is CPython 3.11 on glibc 2.36.
IMAGE_PYTHON = "3.11"
IMAGE_GLIBC_MINOR = 36

_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)$")
_INPUTS = re.compile(r"^# inputs: ([0-9a-f]{64})$", re.MULTILINE)

Say = Callable[[str], None]


@dataclass(frozen=True)
class Locked:
    """One package of the lock: its exact version and the sha256 digests its wheel may have."""

    name: str
    version: str
    hashes: frozenset[str]


@dataclass(frozen=True)
class Lock:
    path: Path
    digest: str  # of the lock file; keys the wheelhouse cache
    inputs: Optional[str]  # the lock_inputs() it was generated from
    packages: dict[str, Locked]  # by canonical name


def canonical(name: str) -> str:
    """A project name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_id(filename: str) -> tuple[str, str]:
    """(canonical name, version) of a wheel file name."""
    parts = filename[:-len(".whl")].split("-") if filename.endswith(".whl") else []
    if len(parts) not in (5, 6):
        raise BuildError(f"{filename} is not a wheel file name")
    return canonical(parts[0]), parts[1]


def platform_args() -> list[str]:
    """pip's target: CPython 3.11 on manylinux x86_64 up to bookworm's glibc, or pure Python."""
    tags = [f"manylinux_2_{minor}_x86_64" for minor in range(17, IMAGE_GLIBC_MINOR + 1)]
    tags += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "any"]
    return ["--only-binary=:all:", "--python-version", IMAGE_PYTHON, "--implementation", "cp", "--abi", "cp311",
            "--abi", "abi3", "--abi", "none", *[arg for tag in tags for arg in ("--platform", tag)]]


def lock_inputs(images: Path) -> str:
    """Digest of what the lock is generated from: the requirements' lines (comments aside) and pip's target."""
    h = hashlib.sha256(" ".join(platform_args()).encode() + b"\0")
    for name in REQUIREMENTS:
        lines = [line.split("#", 1)[0].strip() for line in (images / name).read_text().splitlines()]
        h.update(name.encode() + b"\0" + "\n".join(line for line in lines if line).encode() + b"\0")
    return h.hexdigest()


def read_lock(path: Path) -> Lock:
    """Parse a lock: `name==version --hash=sha256:...` per package, backslash continuations, # comments."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise BuildError(f"{path} is missing; {REFRESH}") from None
    packages: dict[str, Locked] = {}
    for number, entry in enumerate(text.replace("\\\n", " ").splitlines(), 1):
        entry = entry.split("#", 1)[0].strip()
        if not entry:
            continue
        match = _ENTRY.match(entry)
        if match is None:
            raise BuildError(f"{path.name}: entry {number} is not `name==version --hash=sha256:...`: {entry[:60]}")
        name = canonical(match[1])
        if name in packages:
            raise BuildError(f"{path.name}: {name} appears twice")
        packages[name] = Locked(name, match[2], frozenset(_HASH.findall(match[3])))
    if not packages:
        raise BuildError(f"{path} lists no packages; {REFRESH}")
    inputs = _INPUTS.search(text)
    return Lock(path, hashlib.sha256(text.encode()).hexdigest()[:16], inputs and inputs[1], packages)


def check_fresh(lock: Lock, images: Path) -> None:
    """Refuse a lock generated from other requirements (or for another interpreter) than the current ones."""
    if lock.inputs != lock_inputs(images):
        raise BuildError(f"{lock.path.name} is out of date: {' or '.join(REQUIREMENTS)} (or the image's Python) "
                         f"changed since it was generated; {REFRESH}")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def select(folder: Path, lock: Lock) -> list[Path]:
    """The wheels of ``folder`` the lock names at its exact versions, sorted; every locked package needs one.

    Other files are left out of the image's build context, so they cannot be installed.
    """
    chosen, found = [], set()
    for path in sorted(folder.glob("*.whl")):
        name, version = wheel_id(path.name)
        if name in lock.packages and lock.packages[name].version == version:
            chosen.append(path)
            found.add(name)
    missing = sorted(set(lock.packages) - found)
    if missing:
        first = lock.packages[missing[0]]
        raise BuildError(f"the wheelhouse {folder} has no wheel for {first.name}=={first.version} "
                         f"({len(missing)} locked packages missing); delete the folder to download it again")
    return chosen


def verify(folder: Path, lock: Lock) -> list[Path]:
    """Every locked wheel of ``folder``, each checked against the lock's sha256; a mismatch is a one-line error."""
    wheels = select(folder, lock)
    for wheel in wheels:
        digest = sha256(wheel)
        if digest not in lock.packages[wheel_id(wheel.name)[0]].hashes:
            raise BuildError(f"{wheel.name} has sha256 {digest[:16]}…, which {lock.path.name} does not list: "
                             f"the lock and the package index (or the cache {folder}) disagree; if the index's "
                             f"wheel is the one you want, {REFRESH}, else delete {folder} to download again")
    return wheels


def download(target: Path, args: list[str], what: str) -> None:
    """`pip download` with the host's pip into ``target``, for the image's interpreter."""
    cmd = [sys.executable, "-m", "pip", "download", *platform_args(), "--progress-bar", "off", "-d", str(target),
           *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode == 0:
        return
    tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
    if "DO NOT MATCH THE HASHES" in proc.stderr:
        which = re.search(r"^\s+(\S+==\S+) from ", proc.stderr, re.MULTILINE)
        raise BuildError(f"the wheel the package index serves for {which[1] if which else 'a package'} does not "
                         f"match its hash in {LOCK_NAME}: the lock and the package index disagree; {REFRESH}",
                         details=tail)
    raise BuildError(f"pip could not download the wheels in {what}; check the host's pip can reach the package "
                     "index", details=tail)


def fetch(target: Path, lock: Lock, say: Say) -> list[Path]:
    """The wheelhouse in ``target``: downloaded once with --require-hashes, verified against the lock at every use."""
    if not (target / ".complete").is_file():
        say(f"downloading the {len(lock.packages)} wheels of {lock.path.name} (host pip, for CPython {IMAGE_PYTHON} "
            "manylinux, hashes checked)")
        target.mkdir(parents=True, exist_ok=True)
        download(target, ["--require-hashes", "--no-deps", "-r", str(lock.path)], lock.path.name)
        wheels = verify(target, lock)
        (target / ".complete").write_text("ok\n")
        return wheels
    return verify(target, lock)


def render_lock(wheels: list[Path], inputs: str) -> str:
    """The lock file's text for these downloaded wheels: one entry per package, sorted, with its sha256."""
    by_name: dict[str, Path] = {}
    for wheel in wheels:
        name = wheel_id(wheel.name)[0]
        if name in by_name:
            raise BuildError(f"pip downloaded two wheels for {name}: {by_name[name].name} and {wheel.name}")
        by_name[name] = wheel
    lines = [
        "# The trainer images' whole wheelhouse: every package, its exact version and the sha256 of its wheel",
        f"# for CPython {IMAGE_PYTHON} on manylinux x86_64 (glibc up to 2.{IMAGE_GLIBC_MINOR}), generated from",
        "# requirements.txt and requirements-nodeps.txt by `make lock` (python -m orchestrator.images.lock). Do not edit.",
        f"# inputs: {inputs}",
    ]
    for name, wheel in sorted(by_name.items()):
        lines.append(f"{name}=={wheel_id(wheel.name)[1]} \\\n    --hash=sha256:{sha256(wheel)}")
    return "\n".join(lines) + "\n"


def generate_lock(images: Path, cache: Optional[Path], say: Say) -> Lock:
    """Resolve and download the requirements for the image's interpreter, hash every wheel, write the lock.

    The downloaded wheels then seed the wheelhouse cache under the new lock's digest (in ``cache``), so the
    next `orch build` does not download them again; it still verifies them first.
    """
    with tempfile.TemporaryDirectory(prefix="orch-lock-") as tmp:
        folder = Path(tmp)
        for name, extra in zip(REQUIREMENTS, ([], ["--no-deps"])):
            say(f"resolving and downloading {name} (host pip, for CPython {IMAGE_PYTHON} manylinux)")
            download(folder, [*extra, "-r", str(images / name)], name)
        text = render_lock(sorted(folder.glob("*.whl")), lock_inputs(images))
        path = images / LOCK_NAME
        partial = path.with_name(LOCK_NAME + ".tmp")
        partial.write_text(text)
        os.replace(partial, path)
        lock = read_lock(path)
        if cache is not None and not (cache / lock.digest / ".complete").is_file():
            target = cache / lock.digest
            target.mkdir(parents=True, exist_ok=True)
            for wheel in folder.glob("*.whl"):
                shutil.move(wheel, target / wheel.name)
            verify(target, lock)
            (target / ".complete").write_text("ok\n")
    return lock
