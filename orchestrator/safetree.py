"""Removing and copying a tree a container wrote: ``remove_tree`` and ``copy_tree``, whatever the tree, never
following a link.

A container may leave anything in the folders it can write (the shared folder, its own): a folder 1,200 levels
deep (``shutil.rmtree`` recurses, and raises RecursionError on Python 3.10-3.12), millions of entries, names of
any bytes, folders of mode 000, links out of the tree, FIFOs. ``remove_tree`` copes with all of them and says
in one line each what it could not remove, so the finish of a run always completes.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from orchestrator.safeio import _DIR_FLAGS
from orchestrator.safetext import one_line

MAX_PROBLEMS = 5  # lines remove_tree returns about what it left
_BATCH = 10_000  # entries unlinked per scan of a folder


@dataclass
class _Level:
    """One folder on remove_tree's path down: its name in its parent, its identity, the folders in it to enter."""

    name: str
    ident: tuple[int, int]
    subdirs: list[str]
    kept: bool = False  # something in it could not be removed (and was said)


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _enter(parent: int, name: str) -> int:
    """An fd of folder ``name`` in ``parent``, never through a link, made searchable and writable for orch
    (a folder of mode 000 is made so through an O_PATH fd of it, so no link is followed there either)."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        path_fd = os.open(name, getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=parent)
        try:
            os.chmod(f"/proc/self/fd/{path_fd}", 0o700)
        finally:
            os.close(path_fd)
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        mode = os.fstat(fd).st_mode
        if mode & 0o700 != 0o700:
            os.fchmod(fd, stat.S_IMODE(mode) | 0o700)
    except OSError:  # not ours to change: what cannot be removed is said below
        pass
    return fd


def remove_tree(path: Path) -> list[str]:
    """Remove ``path`` and everything in it, whatever a container left there; return what could not be removed,
    at most MAX_PROBLEMS lines ([] when all is gone).

    Copes with any tree: any depth (an explicit stack and one open folder at a time, going back up through
    ".." checked against the folder it came from, where shutil.rmtree recurses), any number of entries (unlinked
    in batches), any names, folders without permissions (made orch's again before they are entered). Never
    follows a link: every entry is named relative to its folder's fd, links are unlinked, folders opened with
    O_NOFOLLOW. ``path`` itself may be a link, which is removed, not followed."""
    problems: list[str] = []
    try:
        parent = os.open(path.parent, _DIR_FLAGS)
    except FileNotFoundError:
        return []
    try:
        try:
            st = os.stat(path.name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return []
        if stat.S_ISDIR(st.st_mode):
            _remove_folder(parent, path, problems)
        else:
            os.unlink(path.name, dir_fd=parent)
    except OSError as exc:
        problems.append(_problem(str(path), exc))
    finally:
        os.close(parent)
    more = len(problems) - MAX_PROBLEMS
    return problems[:MAX_PROBLEMS - 1] + [f"… and {more + 1} more"] if more > 0 else problems


def _problem(where: str, exc: OSError) -> str:
    return one_line(f"{where}: {exc.strerror or exc}")


def _remove_folder(top_parent: int, path: Path, problems: list[str]) -> None:
    def where(name: str = "") -> str:
        parts = [level.name for level in levels[1:]] + ([name] if name else [])
        return "/".join([str(path), *(parts if len(parts) <= 3 else ["…", *parts[-2:]])])

    fd = _enter(top_parent, path.name)
    levels = [_Level(path.name, _ident(fd), [])]
    try:
        levels[0].subdirs = _clear(fd, levels[0], where, problems)
        while levels:
            level = levels[-1]
            if level.subdirs:
                name = level.subdirs.pop()
                try:
                    child = _enter(fd, name)
                except OSError as exc:
                    level.kept = True
                    problems.append(_problem(where(name), exc))
                    continue
                os.close(fd)
                fd = child
                levels.append(_Level(name, _ident(fd), []))
                levels[-1].subdirs = _clear(fd, levels[-1], where, problems)
                continue
            levels.pop()
            if levels:  # back up to the parent, which must be the folder this one was entered from
                up = os.open("..", _DIR_FLAGS, dir_fd=fd)
                if _ident(up) != levels[-1].ident:
                    os.close(up)
                    raise OSError(errno.ESTALE, f"{where(level.name)} was moved while it was removed")
                os.close(fd)
                fd = up
                levels[-1].kept |= level.kept
            try:
                os.rmdir(level.name, dir_fd=fd if levels else top_parent)
            except OSError as exc:
                if not (level.kept and exc.errno == errno.ENOTEMPTY):  # its contents said why already
                    problems.append(_problem(where(level.name) if levels else str(path), exc))
                if levels:
                    levels[-1].kept = True
    finally:
        os.close(fd)


def _clear(fd: int, level: _Level, where: Callable[[str], str], problems: list[str]) -> list[str]:
    """Unlink everything in folder ``fd`` but its folders, whose names it returns. Unlinks in batches of
    _BATCH names between scans, so a scan never runs while its folder changes and memory stays bounded."""
    failed: set[str] = set()
    while True:
        batch: list[str] = []
        folders: list[str] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.name in failed:
                    continue
                try:
                    is_folder = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_folder = False
                (folders if is_folder else batch).append(entry.name)
                if len(batch) >= _BATCH:
                    break
        for name in batch:
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                failed.add(name)
                level.kept = True
                if len(failed) == 1:  # one line per folder: the rest fail the same way
                    problems.append(_problem(where(name), exc))
        if len(batch) < _BATCH:
            return folders


MAX_COPY_DEPTH = 64  # folders deeper than this are not copied (and said): a replica's records are a level or two deep


def copy_tree(source: Path, target: Path) -> list[str]:
    """Copy what a container wrote in ``source`` into the existing folder ``target``, never following a link: folders
    and regular files, with their modes, owners and times; links as links (their text, never what they name) and
    FIFOs made anew (never opened); sockets and devices are left out. Returns a line each (at most MAX_PROBLEMS) for
    what was not copied."""
    problems: list[str] = []
    skipped = 0

    def copy(src: int, dst: int, depth: int, where: str) -> None:
        nonlocal skipped
        for entry in os.scandir(src):
            name = entry.name
            try:
                st = os.stat(name, dir_fd=src, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    if depth >= MAX_COPY_DEPTH:
                        problems.append(one_line(f"{where}{name}: deeper than {MAX_COPY_DEPTH} folders, not copied"))
                        continue
                    os.mkdir(name, 0o700, dir_fd=dst)
                    child, made = _enter(src, name), os.open(name, _DIR_FLAGS, dir_fd=dst)
                    try:
                        copy(child, made, depth + 1, f"{where}{name}/")
                        _same_metadata(made, st)
                    finally:
                        os.close(child)
                        os.close(made)
                elif stat.S_ISREG(st.st_mode):
                    _copy_file(src, dst, name, st)
                elif stat.S_ISLNK(st.st_mode):  # as it was planted: its text, never what it names
                    os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=dst)
                elif stat.S_ISFIFO(st.st_mode):  # made anew, never opened
                    os.mkfifo(name, stat.S_IMODE(st.st_mode) | 0o600, dir_fd=dst)
                else:
                    skipped += 1
            except OSError as exc:
                problems.append(_problem(f"{where}{name}", exc))

    src_fd = os.open(source, _DIR_FLAGS)
    try:
        dst_fd = os.open(target, _DIR_FLAGS)
        try:
            copy(src_fd, dst_fd, 0, f"{source}/")
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
    if skipped:
        problems.append(f"{source}: {skipped} socket(s) or device(s) left out")
    return problems[:MAX_PROBLEMS]


def _copy_file(src: int, dst: int, name: str, st: os.stat_result) -> None:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=src)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for something else since the stat
            raise OSError(errno.EINVAL, "not a regular file")
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst)
        try:
            while os.sendfile(out, fd, None, 1 << 24):
                pass
            _same_metadata(out, st)
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _same_metadata(fd: int, st: os.stat_result) -> None:
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
    if os.getuid() == 0:
        os.fchown(fd, st.st_uid, st.st_gid)
    os.fchmod(fd, stat.S_IMODE(st.st_mode) | 0o600)
