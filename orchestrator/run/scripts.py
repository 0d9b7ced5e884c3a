"""Users' own training scripts (`--script`): checked, then copied, never mounted.

A replica sees a snapshot of the script's folder (or of ``--source DIR``, for a script with sibling modules),
made in the run directory when the run starts: nothing else of the user's filesystem reaches a container.
The snapshot is readable by the containers' user whoever runs orch, and hashed; the hash goes into run.json
and every file's into ``source.sha256`` beside it, so a run can be reproduced.
"""
from __future__ import annotations

import hashlib
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import InvalidSpec

# What a snapshot may hold; ORCH_SOURCE_LIMIT_MB raises the size for a larger project.
DEFAULT_LIMIT_MB = 64
MAX_FILES = 10_000
MAX_DEPTH = 64
# Folders no script imports from, left out of a snapshot: version control, caches and virtual environments.
SKIPPED = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache",
                     ".ipynb_checkpoints", "node_modules"})
_CHUNK = 1 << 20


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


@dataclass(frozen=True)
class Listing:
    """The files a snapshot takes: (path relative to the folder, size), and what it leaves out."""

    folder: Path
    files: tuple[tuple[str, int], ...]
    skipped: tuple[str, ...]  # links, sockets and FIFOs, which are not copied

    @property
    def size(self) -> int:
        return sum(size for _, size in self.files)


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


def _listing(folder: Path, field: str) -> Listing:
    limit = limit_bytes()
    files: list[tuple[str, int]] = []
    skipped: list[str] = []
    total = 0
    stack: list[tuple[str, int]] = [("", 0)]
    while stack:
        rel, depth = stack.pop()
        try:
            entries = sorted(os.scandir(folder / rel), key=lambda e: e.name)
        except OSError as exc:
            raise InvalidSpec(f"{field}: cannot read {folder / rel}: {exc.strerror or exc}") from None
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                if entry.name in SKIPPED:
                    continue
                if depth + 1 >= MAX_DEPTH:
                    raise InvalidSpec(f"{field}: {folder} is nested deeper than {MAX_DEPTH} folders ({path})")
                stack.append((path, depth + 1))
            elif stat.S_ISREG(info.st_mode):
                files.append((path, info.st_size))
                total += info.st_size
                if len(files) > MAX_FILES or total > limit:
                    much = f"{MAX_FILES} files" if len(files) > MAX_FILES else f"{limit >> 20} MiB"
                    raise InvalidSpec(f"{field}: {folder} holds more than {much}, too much to copy into every run; "
                                      "name a smaller folder with --source DIR, or raise ORCH_SOURCE_LIMIT_MB")
            else:
                skipped.append(path)
    return Listing(folder=folder, files=tuple(sorted(files)), skipped=tuple(sorted(skipped)))


def snapshot(listing: Listing, target: Path) -> dict[str, Any]:
    """Copy ``listing``'s files into ``target`` (made here: folders 0755, files 0644, or 0755 where the
    original is executable) and return the record run.json keeps: where from, the count, the size and one
    sha256 over every file's path and hash. ``target``'s parent gets ``source.sha256`` (sha256sum's format)."""
    target.mkdir(mode=0o755)
    lines: list[str] = []
    for rel, _ in listing.files:
        digest = _copy(listing.folder / rel, target / rel)
        lines.append(f"{digest}  {rel}\n")
    manifest = "".join(lines)
    for folder, _, _ in os.walk(target):  # ours, at most MAX_DEPTH deep: readable by the containers' user
        os.chmod(folder, 0o755)
    (target.parent / "source.sha256").write_text(manifest)
    return {"from": str(listing.folder), "files": len(listing.files), "bytes": listing.size,
            "sha256": hashlib.sha256(manifest.encode()).hexdigest(), "skipped": list(listing.skipped)[:20]}


def _copy(source: Path, dest: Path) -> str:
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    digest = hashlib.sha256()
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidSpec(f"source: {source} changed into something other than a file while orch copied it")
        mode = 0o755 if info.st_mode & 0o111 else 0o644
        with os.fdopen(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as out:
            while chunk := os.read(fd, _CHUNK):
                digest.update(chunk)
                out.write(chunk)
            os.fchmod(out.fileno(), mode)  # whatever the umask
    finally:
        os.close(fd)
    return digest.hexdigest()
