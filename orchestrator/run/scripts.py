"""Users' own training scripts (`--script`): checked (``check``, a listing of the folder), then copied (snapshot.py),
never mounted.

A replica sees a snapshot of the script's folder (or of ``--source DIR``, for a script with sibling modules),
made in the run directory when the run starts: nothing else of the user's filesystem reaches a container.
The snapshot is readable by the containers' user whoever runs orch, and hashed; the hash goes into run.json
and every file's into ``source.sha256`` beside it, so a run can be reproduced.
"""
from __future__ import annotations

import errno
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Optional

from orchestrator.errors import InvalidSpec
from orchestrator.safetext import one_line, printable

# What a snapshot may hold; ORCH_SOURCE_LIMIT_MB raises the size for a larger project.
DEFAULT_LIMIT_MB = 64
MAX_FILES = 10_000
MAX_DEPTH = 64
# Folders no script imports from, left out of a snapshot: version control, caches and virtual environments.
SKIPPED = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache",
                     ".ipynb_checkpoints", "node_modules"})
CHUNK = 1 << 20


def absolute(script: Any, base: Path) -> Any:
    """``script`` made absolute against ``base`` (the working folder, or an experiment file's folder), as a
    normalised path string; anything that is not a string is left for the spec to refuse."""
    if not isinstance(script, str) or not script or "\x00" in script:
        return script
    return os.path.normpath(os.path.join(base, os.path.expanduser(script)))


def source_of(spec: Any) -> Path:
    """The folder a job's snapshot is made of: ``--source``, else the script's own folder."""
    return Path(spec.source if spec.source is not None else os.path.dirname(spec.script))


def limit_bytes() -> int:
    """The largest snapshot, from ORCH_SOURCE_LIMIT_MB (default 64)."""
    raw = os.environ.get("ORCH_SOURCE_LIMIT_MB", "")
    try:
        mb = int(raw) if raw else DEFAULT_LIMIT_MB
    except ValueError:
        raise InvalidSpec(f"ORCH_SOURCE_LIMIT_MB: {raw[:40]!r} is not a whole number of MiB, e.g. 256") from None
    if mb < 1:
        raise InvalidSpec(f"ORCH_SOURCE_LIMIT_MB: {mb} is below 1 MiB")
    return mb << 20


class Listed(NamedTuple):
    """One file or folder of a snapshot's listing: its path relative to the folder, size, and identity (device and
    inode; for a file also the time its inode last changed, since a new file may get a removed one's inode)."""

    path: str
    size: int
    device: int
    inode: int
    changed: int = 0  # st_ctime_ns of a file


@dataclass(frozen=True)
class Listing:
    """The files a snapshot takes (``Listed``, in path order), the folders they are in, and what it leaves out."""

    folder: Path
    files: tuple[Listed, ...]
    skipped: tuple[str, ...]  # links, sockets and FIFOs, which are not copied
    folders: tuple[Listed, ...] = ()  # every folder walked, "" the top one: the copy walks the same ones

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


def _homes() -> set[Path]:
    homes = {Path(os.path.expanduser("~"))}
    try:
        homes.update(Path(entry.pw_dir) for entry in pwd.getpwall() if entry.pw_dir not in ("", "/"))
    except OSError:
        pass
    return {Path(os.path.realpath(h)) for h in homes}


def _within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def check(spec: Any, guarded: tuple[Path, ...] = ()) -> Listing:
    """InvalidSpec (one line) unless the script is a readable regular .py file inside a folder orch may copy:
    not /, no home folder, none of ``guarded`` (orch's runs, results and caches) inside it, within the limits.
    Returns what the snapshot will take."""
    script = spec.script
    try:
        info = os.stat(script)
    except OSError as exc:
        raise InvalidSpec(f"script: cannot use {script!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InvalidSpec(f"script: {script!r} is not a regular file")
    if not os.access(script, os.R_OK):
        raise InvalidSpec(f"script: {script!r} is not readable")
    folder = Path(os.path.realpath(source_of(spec)))
    flag = "--source" if spec.source is not None else "--script"
    if not folder.is_dir():
        raise InvalidSpec(f"source: {str(folder)!r} is not a folder")
    if not _within(Path(os.path.realpath(script)), folder):
        raise InvalidSpec(f"source: the script {script!r} is not inside --source {str(folder)!r}")
    advice = "move the script into a folder of its own, or name one with --source DIR"
    if folder == Path("/"):
        raise InvalidSpec(f"{flag[2:]}: {flag} would copy / itself; {advice}")
    for home in _homes():
        if _within(home, folder):
            raise InvalidSpec(f"{flag[2:]}: {flag} would copy the home folder {home}, with its keys and "
                              f"credentials; {advice}")
    for path in guarded:
        if _within(Path(os.path.realpath(path)), folder):
            raise InvalidSpec(f"{flag[2:]}: {folder} holds orch's own {path.name}/ folder, which replicas must not "
                              f"see; {advice}, or keep orch's folders elsewhere (--runs-dir, --results-dir)")
    return _listing(folder, flag[2:])


DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


class Walker:
    """The source folder opened once, and its subfolders reached from it one name at a time through directory file
    descriptors, each opened without following a link and checked against the identity the listing recorded: a
    folder swapped for a link, or for another folder, between the listing and the copy is refused, never followed."""

    def __init__(self, folder: Path, field: str, known: Optional[dict[str, tuple[int, int]]] = None) -> None:
        self.folder, self.field = folder, field
        self.known = known  # the listing's identities (path -> device, inode); None while listing
        self.seen: dict[str, tuple[int, int]] = {}
        try:
            self.top = os.open(folder, DIR_FLAGS)
        except OSError as exc:
            raise InvalidSpec(f"{field}: cannot read {folder}: {exc.strerror or exc}") from None
        self._check("", os.fstat(self.top))
        self.at, self.fd = "", self.top

    def _check(self, rel: str, st: os.stat_result) -> None:
        if self.known is None:
            self.seen[rel] = ident(st)
        elif self.known.get(rel) != ident(st):
            raise changed(self.folder, rel or ".", "was replaced by another folder")

    def enter(self, rel: str) -> int:
        """An fd of subfolder ``rel`` (held until the next call), reached name by name from the top."""
        if rel == self.at:
            return self.fd
        self.leave()
        fd, so_far = os.dup(self.top), ""
        try:
            for name in rel.split("/") if rel else ():
                so_far = f"{so_far}/{name}" if so_far else name
                try:
                    child = os.open(name, DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    reason = ("was replaced by a link or a file" if exc.errno in (errno.ELOOP, errno.ENOTDIR)
                              else f"cannot be read: {exc.strerror or exc}")
                    raise changed(self.folder, so_far, reason) from None
                os.close(fd)
                fd = child
                self._check(so_far, os.fstat(fd))
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
        os.close(self.top)


def changed(folder: Path, rel: str, how: str) -> InvalidSpec:
    """The snapshot refused: ``rel`` of ``folder`` changed between the listing and the copy."""
    return InvalidSpec(one_line(f"source: {shown_path(folder, rel)} {how} while orch copied the folder; run again "
                                "once it holds still", 400))


def shown_path(folder: Path, rel: str) -> str:
    """``folder``/``rel`` for a message: its control characters (a newline in a name) shown, not obeyed."""
    return printable(str(folder / rel) if rel != "." else str(folder))


def _listing(folder: Path, field: str) -> Listing:
    limit = limit_bytes()
    files: list[Listed] = []
    skipped: list[str] = []
    total = 0
    walker = Walker(folder, field)
    try:
        stack: list[tuple[str, int]] = [("", 0)]
        while stack:
            rel, depth = stack.pop()
            try:
                with os.scandir(walker.enter(rel)) as found:
                    entries = sorted(found, key=lambda e: e.name)
            except OSError as exc:
                raise InvalidSpec(f"{field}: cannot read {shown_path(folder, rel)}: {exc.strerror or exc}") from None
            for entry in entries:
                path = f"{rel}/{entry.name}" if rel else entry.name
                try:
                    info = entry.stat(follow_symlinks=False)  # fstatat in the folder's fd: the entry itself
                except FileNotFoundError:  # gone since the folder was read: not there to copy
                    continue
                if stat.S_ISDIR(info.st_mode):
                    if entry.name in SKIPPED:
                        continue
                    if depth + 1 >= MAX_DEPTH:
                        raise InvalidSpec(f"{field}: {folder} is nested deeper than {MAX_DEPTH} folders "
                                          f"({shown_path(folder, path)})")
                    walker.seen[path] = ident(info)
                    stack.append((path, depth + 1))
                elif stat.S_ISREG(info.st_mode):
                    files.append(Listed(path, info.st_size, *ident(info), info.st_ctime_ns))
                    total += info.st_size
                    if len(files) > MAX_FILES or total > limit:
                        much = f"{MAX_FILES} files" if len(files) > MAX_FILES else f"{limit >> 20} MiB"
                        raise InvalidSpec(f"{field}: {folder} holds more than {much}, too much to copy into every "
                                          "run; name a smaller folder with --source DIR, or raise ORCH_SOURCE_LIMIT_MB")
                else:
                    skipped.append(path)
    finally:
        walker.close()
    folders = tuple(Listed(path, 0, *ident) for path, ident in sorted(walker.seen.items()))
    return Listing(folder=folder, files=tuple(sorted(files)), skipped=tuple(sorted(skipped)), folders=folders)
