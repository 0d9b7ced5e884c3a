"""orch's base images, made offline where none can be pulled: a Debian minbase tree from debootstrap (the archive's
signatures checked against Debian's keyring), pruned and imported into the engine (``bootstrap_bases``). Only
debootstrap and the tar and removal of its tree run as root, through sudo when orch is not root."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Callable, cast

from orchestrator.docker.engine import Engine
from orchestrator.errors import BuildError, OrchError

Say = Callable[[str], None]
ROOT_HINT = "run `orch build --bootstrap-base` as root once, or use --base IMAGE"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# debootstrap checks the Release file's signature against Debian's archive keys, then every package
# against the signed checksums, so a plain-http mirror cannot slip in anything else.
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
BASE_PACKAGES = ("python3", "python3-venv")
BUILD_BASE_PACKAGES = (*BASE_PACKAGES, "g++")
# Parts of a minbase tree no container needs; left out of the imported tar, they keep the base small.
BASE_PRUNE = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "var/cache/apt/archives",
              "var/lib/apt/lists")


def _root_prefix(say: Say) -> list[str]:
    """How the root step runs: directly when orch is root, else through sudo (`sudo -n` without a terminal)."""
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") is None:
        raise OrchError(f"--bootstrap-base runs debootstrap as root and sudo is not installed; {ROOT_HINT}")
    interactive = sys.stdin.isatty()
    if interactive:
        say("debootstrap needs root: sudo may ask for your password")
    probe = subprocess.run(["sudo", "-v"] if interactive else ["sudo", "-n", "true"],
                           stdout=subprocess.DEVNULL, stderr=None if interactive else subprocess.DEVNULL)
    if probe.returncode != 0:
        raise OrchError(f"--bootstrap-base runs debootstrap as root and sudo refused"
                        f"{'' if interactive else ' without a password (no terminal)'}; {ROOT_HINT}")
    return ["sudo"] if interactive else ["sudo", "-n"]


def _debootstrap(mirror: str) -> tuple[str, str]:
    """debootstrap's path and the keyring it verifies with; a one-line error says what to install."""
    found = shutil.which("debootstrap", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    if found is None:
        raise OrchError("debootstrap is not installed; install it (`apt-get install debootstrap`, or `make "
                        "system-deps`) or use --base IMAGE")
    if not KEYRING.is_file() or shutil.which("gpgv") is None:
        raise OrchError(f"{KEYRING if not KEYRING.is_file() else 'gpgv'} is missing, so debootstrap cannot check "
                        f"{mirror}'s signatures; install it (`apt-get install debian-archive-keyring gpgv`, or "
                        "`make system-deps`) or use --base IMAGE")
    return found, str(KEYRING)


def debootstrap_command(debootstrap: str, target: Path, mirror: str, keyring: str = str(KEYRING),
                        packages: tuple[str, ...] = BASE_PACKAGES) -> list[str]:
    return [debootstrap, "--variant=minbase", "--keyring", keyring, "--force-check-gpg",
            f"--include={','.join(packages)}", "bookworm", str(target), mirror]


def tar_command(target: Path) -> list[str]:
    """The bootstrapped tree as a tar on stdout, without BASE_PRUNE (root reads it; no root-owned file is removed)."""
    excludes = [f"--exclude=./{rel}" for rel in BASE_PRUNE]
    return ["tar", "-C", str(target), "--numeric-owner", "--anchored", *excludes, "-c", "."]


def bootstrap_base(engine: Engine, tag: str, mirror: str, say: Say, packages: tuple[str, ...] = BASE_PACKAGES) -> None:
    """Create a Debian bookworm base image with python3 (and any other of ``packages``) by debootstrap and
    `docker import`.

    Only debootstrap, the tar of its tree and the tree's removal run as root (through sudo unless orch is
    root); the import into the engine runs as the invoking user.
    """
    bootstrap_bases(engine, [(tag, packages)], mirror, say)


def bootstrap_bases(engine: Engine, bases: list[tuple[str, tuple[str, ...]]], mirror: str, say: Say) -> None:
    """Create every base image of ``bases`` (tag, packages) as bootstrap_base does, side by side: each debootstrap
    waits on the mirror and on dpkg in turn, so two at once take less than one after the other. sudo asks once."""
    if not bases:
        return
    debootstrap, keyring = _debootstrap(mirror)
    prefix = _root_prefix(say)
    importing = threading.Lock()  # one import at a time into the engine
    failed: list[BaseException] = []

    def one(tag: str, packages: tuple[str, ...]) -> None:
        try:
            _bootstrap_tree(engine, tag, mirror, say, packages, debootstrap, keyring, prefix, importing)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller's thread, below
            failed.append(exc)

    workers = [threading.Thread(target=one, args=base, name=f"debootstrap {base[0]}") for base in bases]
    for worker in workers:
        worker.start()
    for worker in workers:
        while worker.is_alive():  # a short join: Ctrl-C reaches this thread; debootstrap gets it from the terminal
            worker.join(0.5)
    if failed:
        raise failed[0]


def _bootstrap_tree(engine: Engine, tag: str, mirror: str, say: Say, packages: tuple[str, ...], debootstrap: str,
                    keyring: str, prefix: list[str], importing: threading.Lock) -> None:
    repo, _, version = tag.partition(":")
    scratch = Path(tempfile.mkdtemp(prefix="orch-rootfs-"))
    root = scratch / "rootfs"  # created by debootstrap, as root with mode 0755: the image's /
    try:
        say(f"debootstrap bookworm ({', '.join(packages)}) from {mirror} for {tag}, signatures checked")
        proc = subprocess.run([*prefix, *debootstrap_command(debootstrap, root, mirror, keyring, packages)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
            raise BuildError(f"debootstrap failed (exit {proc.returncode}); check that {mirror} is reachable and "
                             "its Release file is signed by a key in the keyring", details=tail)
        say(f"importing the root filesystem as {tag}")
        tar = subprocess.Popen([*prefix, *tar_command(root)], stdout=subprocess.PIPE)
        stream = cast(IO[bytes], tar.stdout)  # a pipe, as asked
        try:
            with importing:
                engine.import_image(stream, repo, version or "latest")
        finally:
            stream.close()
            if tar.wait() != 0:
                raise BuildError("tar of the bootstrapped root filesystem failed")
    finally:
        rm = subprocess.run([*prefix, "rm", "-rf", "--one-file-system", "--", str(root)], capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)
        if rm.returncode != 0 or scratch.exists():
            say(f"could not remove {scratch}; remove it as root")
