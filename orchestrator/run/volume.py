"""A run's writable folders on a file system of their own, sized to ``--disk-limit``: the kernel then stops a replica
at the limit (ENOSPC) whether or not any orch process is there to, and the disk guard (disk.py) comes second.

Where orch runs as root, ``bind`` makes a sparse image a little over the limit (``image_mb``) in the run directory's
``.disk/`` folder,
formats it (ext4, no journal, no reserved blocks, so the replicas get nearly all of it), mounts it there, and mounts
a folder of it over each folder the replicas write (``<role>-<i>``, ``shared``): the engine's bind mounts then reach
the limited file system, and every reader of the run directory sees the files where they always were. ``release``,
at the run's finish, copies what the replicas wrote back into the run directory (``copy_tree``: never through a
link), unmounts, and removes the image. Elsewhere (not root, no ext4 tools, a limit of 0) nothing is mounted:
``bind`` says why in one line, and the guard alone holds the limit while the supervisor lives.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Optional

from orchestrator import contract
from orchestrator.run.rundir import CONTAINER_UID, RunDir
from orchestrator.safetree import copy_tree, remove_tree
from orchestrator.safetext import one_line

DISK_DIR = ".disk"  # in the run directory: the image and its mount point, orch's alone (never mounted in a replica)
IMAGE = "volume.img"
MOUNT = "mnt"
COMMAND_TIMEOUT = 60


def image_mb(limit_mb: int) -> int:
    """The file system's size for a limit: an eighth more, and 16 MiB for ext4's own tables, so that the disk guard,
    while a supervisor runs, still stops the replicas at the limit itself and names it; the kernel's stop, which
    holds without one, comes at most about that eighth past the limit."""
    return limit_mb + limit_mb // 8 + 16


def _run(*argv: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)
    if proc.returncode != 0:
        raise OSError(f"{argv[0]} failed: {one_line((proc.stderr or proc.stdout).strip(), 200)}")


def folders(spec: Any) -> list[str]:
    """The run-directory folders the replicas of ``spec`` write: their own, and the shared one."""
    return [f"{role}-{index}" for role, index in spec.replica_keys()] + [contract.SHARED_DIR]


def why_not(limit_mb: int) -> Optional[str]:
    """Why no file system can hold this run's limit here, or None if one can."""
    if not limit_mb:
        return "--disk-limit is 0"
    if os.geteuid() != 0:
        return "mounting one needs root"
    if shutil.which("mkfs.ext4") is None or shutil.which("mount") is None:
        return "mkfs.ext4 (e2fsprogs) or mount is missing"
    return None


def bind(run: RunDir, folders: list[str], limit_mb: int) -> Optional[str]:
    """Put ``folders`` of ``run`` (made, empty) on a file system of ``limit_mb`` MiB. None once they are; else the
    one-line reason they are not, with nothing left mounted or made."""
    reason = why_not(limit_mb)
    if reason is not None:
        return reason
    top = run.path / DISK_DIR
    image, mnt = top / IMAGE, top / MOUNT
    try:
        top.mkdir(mode=0o700)
        mnt.mkdir(mode=0o700)
        with open(image, "wb") as f:
            f.truncate(image_mb(limit_mb) << 20)
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E",
             f"root_owner={CONTAINER_UID}:{CONTAINER_UID}", str(image))
        _run("mount", "-o", "loop,nosuid,nodev,noexec", str(image), str(mnt))
        for name in folders:
            inner = mnt / name
            inner.mkdir()
            os.chown(inner, CONTAINER_UID, CONTAINER_UID)
            _run("mount", "--bind", str(inner), str(run.path / name))
    except (OSError, subprocess.SubprocessError) as exc:
        release(run, folders)
        return one_line(f"it could not be mounted: {exc}", 300)
    return None


def is_bound(run: RunDir) -> bool:
    return os.path.ismount(run.path / DISK_DIR / MOUNT)


def release(run: RunDir, folders: list[str], drop: tuple[str, ...] = ()) -> list[str]:
    """Bring the replicas' files home from the run's file system, but for the folders in ``drop``, and remove it: a
    line each for what could not be (nothing, for a run that has none)."""
    top = run.path / DISK_DIR
    if not os.path.lexists(top):
        return []
    mnt, problems = top / MOUNT, []
    for name in folders:
        folder = run.path / name
        if os.path.ismount(folder):
            try:
                _run("umount", str(folder))
            except (OSError, subprocess.SubprocessError) as exc:
                problems.append(one_line(f"{folder}: {exc}"))
                continue
        if name not in drop and os.path.ismount(mnt) and (mnt / name).is_dir() and not (mnt / name).is_symlink():
            problems += copy_tree(mnt / name, folder)
    if os.path.ismount(mnt):
        try:
            _run("umount", str(mnt))
        except (OSError, subprocess.SubprocessError) as exc:
            return problems + [one_line(f"{mnt}: {exc}; the run's file system stays in {top}")]
    return problems + remove_tree(top)
