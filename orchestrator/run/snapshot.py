"""The snapshot of a script's folder (``snapshot``): the files ``scripts.check`` listed, copied into the run directory
for the replicas through file descriptors that name what was listed (a file or folder swapped since is refused, never
followed), hashed, with every file's hash in ``source.sha256``."""
from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path
from typing import Any, Iterator

from orchestrator.run.scripts import (CHUNK, DIR_FLAGS, READ_FLAGS, WRITE_FLAGS, Listed, Listing, Walker, changed,
                                      ident)

def hash_line(digest: str, rel: str) -> bytes:
    """One line of ``source.sha256``, as ``sha256sum`` writes it: the name's bytes, and where they hold a backslash or
    a newline, those escaped (``\\\\``, ``\\n``) and the line started with a backslash, so that no name can
    write a line of its own, and ``sha256sum -c`` reads it back."""
    name = os.fsencode(rel)
    if b"\\" in name or b"\n" in name:
        return b"\\" + digest.encode() + b"  " + name.replace(b"\\", b"\\\\").replace(b"\n", b"\\n") + b"\n"
    return digest.encode() + b"  " + name + b"\n"


def snapshot(listing: Listing, target: Path) -> dict[str, Any]:
    """Copy ``listing``'s files into ``target`` (made here: folders 0755, files 0644, or 0755 where the
    original is executable) and return the record run.json keeps: where from, the count, the size and one
    sha256 over every file's path and hash. ``target``'s parent gets ``source.sha256`` (sha256sum's format).

    Nothing is copied by path: every folder is reached from the listed top one through directory fds, each checked
    against the listing (``Walker``), and every file is opened without following a link, checked to be the file
    listed (same identity and size), read once, and hashed as the bytes copied; a file that changed size or identity
    is refused (InvalidSpec, one line)."""
    walker = Walker(listing.folder, "source", {f.path: (f.device, f.inode) for f in listing.folders})
    lines: list[bytes] = []
    try:
        target.mkdir(mode=0o755)
        out = _Target(target)
        try:
            for listed in listing.files:
                folder, _, name = listed.path.rpartition("/")
                digest = _copy(walker.enter(folder), name, out.enter(folder), listed, listing.folder)
                lines.append(hash_line(digest, listed.path))
        finally:
            out.close()
    finally:
        walker.close()
    manifest = b"".join(lines)
    (target.parent / "source.sha256").write_bytes(manifest)
    return {"from": str(listing.folder), "files": len(listing.files), "bytes": listing.size,
            "sha256": hashlib.sha256(manifest).hexdigest(), "skipped": list(listing.skipped)[:20]}


class _Target:
    """The snapshot's own folders (orch's, in the run directory), made 0755 and held by fd as the copy goes."""

    def __init__(self, target: Path) -> None:
        self.top = os.open(target, DIR_FLAGS)
        self.at, self.fd = "", self.top

    def enter(self, rel: str) -> int:
        if rel == self.at:
            return self.fd
        self.leave()
        fd = os.dup(self.top)
        try:
            for name in rel.split("/") if rel else ():
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
                os.fchmod(child, 0o755)  # whatever the umask: readable by the containers' user
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        self.at, self.fd = rel, fd
        return fd

    def leave(self) -> None:
        if self.fd != self.top:
            os.close(self.fd)
        self.at, self.fd = "", self.top

    def close(self) -> None:
        self.leave()
        os.fchmod(self.top, 0o755)
        os.close(self.top)


def _copy(source_dir: int, name: str, target_dir: int, listed: Listed, folder: Path) -> str:
    """Copy file ``name`` of ``source_dir`` (``listed``) into ``target_dir``; the sha256 of the bytes copied."""
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=source_dir)
    except OSError as exc:
        reason = ("was replaced by a link" if exc.errno in (errno.ELOOP, errno.EMLINK)
                  else "is gone" if exc.errno == errno.ENOENT else f"cannot be read: {exc.strerror or exc}")
        raise changed(folder, listed.path, reason) from None
    digest = hashlib.sha256()
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or ident(info) != (listed.device, listed.inode):
            raise changed(folder, listed.path, "was replaced by another file")
        if info.st_size != listed.size:
            raise changed(folder, listed.path, f"changed size ({listed.size:,} bytes listed, {info.st_size:,} now)")
        if info.st_ctime_ns != listed.changed:
            raise changed(folder, listed.path, "was replaced or rewritten")
        mode = 0o755 if info.st_mode & 0o111 else 0o644
        out = os.open(name, WRITE_FLAGS, mode, dir_fd=target_dir)
        try:
            left = listed.size
            for chunk in _chunks(fd, listed.size):
                digest.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
                left -= len(chunk)
            if left:
                raise changed(folder, listed.path, f"shrank ({listed.size:,} bytes listed, {listed.size - left:,} read)")
            after = os.fstat(fd)
            if os.read(fd, 1):
                raise changed(folder, listed.path, f"grew past the {listed.size:,} bytes listed")
            if after.st_size != listed.size:  # cut short after its bytes were read
                raise changed(folder, listed.path, f"changed size while it was copied ({listed.size:,} bytes listed, "
                                                   f"{after.st_size:,} now)")
            if after.st_ctime_ns != listed.changed:
                raise changed(folder, listed.path, "was rewritten")
            os.fchmod(out, mode)  # whatever the umask
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return digest.hexdigest()


def _chunks(fd: int, size: int) -> Iterator[bytes]:
    """The first ``size`` bytes of ``fd``, a chunk at a time, and no more (fewer where the file is shorter)."""
    left = size
    while left > 0:
        chunk = os.read(fd, min(CHUNK, left))
        if not chunk:
            return
        left -= len(chunk)
        yield chunk
