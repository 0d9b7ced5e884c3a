"""Who supervises a run: an exclusive lock on the run's ``supervisor.lock``, held for the supervisor's whole life.

The kernel drops the lock the moment its holder dies, however it dies (``kill -9`` included), so "is this run
supervised?" is answered by trying the lock, never by a recorded PID that another process may have taken since. The
holder writes its PID into the file for the reader's sake (``holder``); only orch writes the run directory's top
level, and the file is opened without following a link.
"""
from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from typing import Optional

LOCK_FILE = "supervisor.lock"
_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC


class Lease:
    """The lock of one run, held: ``release`` (or the holder's death) lets another supervisor take the run."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the only descriptor drops the lock
            self.fd = -1


def acquire(run_path: Path) -> Optional[Lease]:
    """Take the run's lock, or None if a live supervisor holds it; the holder's PID is written into the file."""
    fd = os.open(run_path / LOCK_FILE, os.O_RDWR | os.O_CREAT | _FLAGS, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return Lease(fd)


def holder(run_path: Path) -> Optional[int]:
    """The PID of the live process that supervises the run, or None if no process does (0 if its PID is unreadable)."""
    try:
        fd = os.open(run_path / LOCK_FILE, os.O_RDONLY | _FLAGS)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raw = os.pread(fd, 32, 0).strip()
            return int(raw) if raw.isdigit() else 0
        return None  # free: whoever held it is gone (the shared lock goes with this descriptor)
    finally:
        os.close(fd)
