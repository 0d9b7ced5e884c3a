"""Files across the trust boundary, and files orch writes: never follow a link, never block, never half-write.

Reading: everything a container wrote is input, not state. ``read_bounded`` and ``Tail`` open a name
relative to a folder orch made, refuse links and anything but a regular file, never block (a FIFO is
refused, not waited on), and read at most a given number of bytes. ``append_bounded``, the one way orch
appends to a file in a folder a container can write, opens it the same way and appends up to a limit.

Removing what a container left: ``safetree.remove_tree``.

Writing: ``atomic_write`` writes a unique temporary file in the target's folder, fsyncs it, renames it
over the target and fsyncs the folder, so a crash or a full disk leaves the old file or the new one,
never a truncated one. ``locked`` holds an exclusive lock on a folder while orch writes to it.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from orchestrator.contract import finite
from orchestrator.errors import OrchError

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Unsafe(Exception):
    """A file a container wrote is not something orch will read: a link, a FIFO, a device, too large."""


def _open_regular(path: Path, flags: int = _READ_FLAGS, mode: int = 0o644) -> int:
    """An fd of ``path`` opened (non-blocking) without following a link in its last part, checked to be a
    regular file.

    The folders above it are orch's own (the run directory and the replica folders it created and
    mounted); a container cannot replace them, since a mount point cannot be renamed or removed."""
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise Unsafe(f"{path.name} is a symbolic link") from None
        if exc.errno == errno.ENXIO:  # a FIFO no one reads, opened for writing without blocking
            raise Unsafe(f"{path.name} is not a regular file") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Unsafe(f"{path.name} is not a regular file")
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: Path, limit: int) -> Optional[bytes]:
    """The bytes of regular file ``path``, or None if it is missing. Unsafe if it is a link, not a regular
    file, or larger than ``limit`` bytes."""
    try:
        fd = _open_regular(path)
    except FileNotFoundError:
        return None
    try:
        chunks, size = [], 0
        while size <= limit:
            data = os.read(fd, limit + 1 - size)
            if not data:
                break
            chunks.append(data)
            size += len(data)
        if size > limit:
            raise Unsafe(f"{path.name} is larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json_bounded(path: Path, limit: int = 1 << 20) -> Optional[Any]:
    """The JSON in a file a container wrote, or None if it is missing, unsafe, too large or not JSON."""
    try:
        data = read_bounded(path, limit)
        return None if data is None else json.loads(data)
    except (Unsafe, OSError, ValueError, RecursionError):
        return None


def append_bounded(path: Path, data: bytes, limit: int) -> bool:
    """Append ``data`` to regular file ``path`` (made, mode 0644, if missing) unless the file would grow past
    ``limit`` bytes: True if written, False if not. Unsafe if it is a link or not a regular file; never blocks
    (a FIFO is refused, not waited on for a reader)."""
    fd = _open_regular(path, _APPEND_FLAGS)
    try:
        if os.fstat(fd).st_size + len(data) > limit:
            return False
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        return True
    finally:
        os.close(fd)


def mtime(path: Path) -> float:
    """When regular file ``path`` was last modified, without following a link; 0 if missing or not a file."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return 0.0
    return st.st_mtime if stat.S_ISREG(st.st_mode) else 0.0


class Tail:
    """Complete lines appended to a file a container writes, a bounded amount per read and in all.

    A line longer than ``max_line`` is dropped whole (up to its newline) and counted in ``too_long``, so a line
    with no newline cannot grow in memory from read to read; at most ``max_read`` bytes are read per call, and
    none past the first ``limit`` bytes of the file (``capped`` then says so, and ``unread`` how many bytes the
    file held beyond). A link, FIFO or other non-regular file yields nothing, and so does a file that shrank.
    """

    def __init__(self, path: Path, max_line: int = 64 << 10, max_read: int = 4 << 20,
                 limit: Optional[int] = None) -> None:
        self.path, self.max_line, self.max_read, self.limit = path, max_line, max_read, limit
        self.offset = 0
        self.size = 0  # the file's size when it was last opened
        self.pending = b""
        self.skipping = False  # inside an over-long line, dropping until its newline
        self.too_long = 0
        self.refused: Optional[str] = None

    @property
    def capped(self) -> bool:
        """Whether the file has grown past ``limit``, which is all of it this tail reads."""
        return self.limit is not None and self.size > self.limit

    @property
    def unread(self) -> int:
        """Bytes of the file past ``limit``, which this tail never reads."""
        return max(self.size - self.limit, 0) if self.limit is not None else 0

    def read(self) -> list[bytes]:
        try:
            fd = _open_regular(self.path)
        except FileNotFoundError:
            return []
        except (Unsafe, OSError) as exc:
            self.refused = str(exc)
            return []
        try:
            self.size = os.fstat(fd).st_size
            if self.size < self.offset:
                self.refused = f"{self.path.name} shrank"
                return []
            want = self.max_read if self.limit is None else min(self.max_read, self.limit - self.offset)
            if want <= 0:
                return []
            os.lseek(fd, self.offset, os.SEEK_SET)
            chunk = os.read(fd, want)
        finally:
            os.close(fd)
        self.offset += len(chunk)
        *complete, rest = (self.pending + chunk).split(b"\n")
        lines = []
        for line in complete:
            if self.skipping:  # the first newline ends the over-long line
                self.skipping = False
            elif len(line) <= self.max_line:
                lines.append(line)
            else:
                self.too_long += 1
        if self.skipping or len(rest) > self.max_line:
            self.too_long += not self.skipping
            self.pending, self.skipping = b"", True
        else:
            self.pending = rest
        return lines


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` so that a reader, a crash or a full disk sees the old file or the new one."""
    payload = data.encode() if isinstance(data, str) else data
    atomic_write_with(path, lambda f: f.write(payload))


def atomic_write_with(path: Path, write: Callable[[Any], Any], mode: str = "wb") -> None:
    """Like ``atomic_write``, with ``write(file)`` filling a temporary file opened in ``mode`` (``wb`` or ``w``)."""
    folder = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, mode, newline=None if "b" in mode else "") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(folder, _DIR_FLAGS)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def dumps(payload: Any, indent: Optional[int] = None, **options: Any) -> str:
    """``payload`` as strict JSON: a number that is not finite becomes null with its reason beside it
    (``contract.finite``), so NaN and Infinity, which a strict parser refuses, are never written."""
    return json.dumps(finite(payload), indent=indent, allow_nan=False, default=str, **options)


def write_json(path: Path, payload: Any) -> None:
    """``payload`` as indented strict JSON (``dumps``), written atomically."""
    atomic_write(path, dumps(payload, indent=2) + "\n")


class FolderBusy(OrchError):
    """Another orch process is writing to the same folder."""

    exit_code = 2


@contextlib.contextmanager
def waiting_for(folder: Path) -> Iterator[None]:
    """Wait for, then hold, an exclusive lock on ``folder`` itself (made if missing), for work one orch process of
    this user does at a time while the others wait (a cache they then find made)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # and the lock with it


@contextlib.contextmanager
def locked(folder: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (a ``.orch.lock`` file in it) while orch writes there.

    A second orch that wants the same folder fails at once with a message, rather than interleaving."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".orch.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderBusy(f"{folder} is in use by another orch ({what} there); wait for it to finish, or "
                             "use another --out folder") from None
        yield
    finally:
        os.close(fd)

