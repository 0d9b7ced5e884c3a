"""The disk watch: how much a run's replicas have written into the host folders they can write, and how much
space is left on the disk that holds the runs.

The replicas' own folders and the shared folder are bind mounts with no quota, so a container could fill the
disk every run and result lives on. The runner measures them every ``EVERY`` seconds (less often where a scan
is slow: ``interval``); the supervisor stops
the run when they pass ``--disk-limit`` or when the free space falls below the floor. The scan never follows
a link and stops early, so a tree of millions of files costs at most ``MAX_ENTRIES`` looks.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

EVERY = 1.0  # seconds between two measurements, at least
SHARE = 0.05  # at most this share of one core: a scan that took t seconds waits t / SHARE before the next
MAX_ENTRIES = 200_000  # files and folders one scan looks at; more fail the run
DEFAULT_FLOOR_MB = 1024  # free space orch keeps on the runs' disk; ORCH_DISK_FLOOR_MB changes it


def interval(scan_seconds: float) -> float:
    """Seconds from one scan to the next: EVERY, or longer where the replicas left so many files that scanning
    them every EVERY seconds would take more than SHARE of a core."""
    return max(EVERY, scan_seconds / SHARE)


def floor_bytes() -> int:
    raw = os.environ.get("ORCH_DISK_FLOOR_MB", "")
    return (int(raw) if raw.isdigit() else DEFAULT_FLOOR_MB) << 20


@dataclass(frozen=True)
class DiskUse:
    """One measurement: bytes written per folder (``<role>-<i>``, ``shared``), entries seen, the disk's free
    bytes, and whether the scan stopped early (at ``stop_at`` bytes or MAX_ENTRIES entries)."""

    written: dict[str, int] = field(default_factory=dict)
    entries: int = 0
    free: Optional[int] = None
    complete: bool = True
    floor: int = DEFAULT_FLOOR_MB << 20  # the free space to keep, as measure() read it

    @property
    def total(self) -> int:
        return sum(self.written.values())

    def largest(self) -> str:
        return max(self.written, key=lambda name: self.written[name]) if self.written else ""


def measure(run_path: Path, folders: list[str], stop_at: Optional[int] = None) -> DiskUse:
    """What ``folders`` of ``run_path`` hold on disk (allocated blocks, never through a link), and the free
    space of its file system; stops once past ``stop_at`` bytes or MAX_ENTRIES entries."""
    written: dict[str, int] = {}
    entries, total = 0, 0
    for name in folders:
        used = 0
        stack = [run_path / name]
        while stack:
            folder = stack.pop()
            try:
                with os.scandir(folder) as listing:
                    for entry in listing:
                        entries += 1
                        try:
                            info = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        used += info.st_blocks * 512
                        if stat.S_ISDIR(info.st_mode):
                            stack.append(Path(entry.path))
                        if entries > MAX_ENTRIES or (stop_at is not None and total + used > stop_at):
                            written[name] = used
                            return DiskUse(written, entries, _free(run_path), complete=False, floor=floor_bytes())
            except OSError:  # gone, or not ours to read: nothing counted there
                continue
        written[name] = used
        total += used
    return DiskUse(written, entries, _free(run_path), floor=floor_bytes())


def free_below(path: Path) -> Optional[int]:
    """The free bytes of the disk that holds ``path``, or will once it is made (its nearest existing folder)."""
    for folder in (path, *path.parents):
        if folder.exists():
            return _free(folder)
    return None


def _free(path: Path) -> Optional[int]:
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def verdict(use: DiskUse, limit_mb: int) -> Optional[str]:
    """Why the run must stop, in one line, or None."""
    floor = use.floor
    if use.entries > MAX_ENTRIES:
        return (f"the replicas wrote more than {MAX_ENTRIES:,} files and folders into the run's folders "
                f"(most under {use.largest()}/); the replicas were stopped")
    if limit_mb and use.total > limit_mb << 20:
        return (f"the replicas wrote {use.total / 2**20:,.0f} MiB or more into the run's folders (most in "
                f"{use.largest()}/, {use.written[use.largest()] / 2**20:,.0f} MiB), over --disk-limit {limit_mb} "
                "MiB; the replicas were stopped; raise --disk-limit if the job needs it")
    if use.free is not None and use.free < floor:
        return (f"the disk that holds the runs has {use.free / 2**20:,.0f} MiB free, below orch's floor of "
                f"{floor >> 20} MiB (ORCH_DISK_FLOOR_MB); the replicas were stopped so the host keeps working; "
                "free some space, or point ORCH_RUNS_DIR at a larger disk")
    return None
