"""The disk guard: how much a run's replicas have written into the host folders they can write, how much space is
left on the disk that holds the runs, and the stop of every writer once they pass ``--disk-limit``.

The replicas' own folders and the shared folder are bind mounts. No quota this engine can set binds them:
``--storage-opt size`` needs overlay2 on XFS with project quotas (this driver is fuse-overlayfs), the runs' ext4 has
no project quotas, a loop-mounted file system needs root, and a size-limited tmpfs holds its bytes in the
replica's memory and loses them when the replica ends (benchmarks/disk_limit.py measures each). So the kernel
bounds what it can: each replica's files are capped at the limit (RLIMIT_FSIZE: a writer of one file stops at the
limit exactly), and a guard thread measures the folders (``measure``) as often as a scan's cost allows, more often
as the write rate eats the headroom (``interval``), and at the limit kills every replica's processes at once,
through pidfds opened when the attempt started (``Guard``), before the supervisor ends the run in one line. The
scan never follows a link and stops early, so a tree of millions of files costs at most ``MAX_ENTRIES`` looks.
"""
from __future__ import annotations

import os
import re
import signal
import stat
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

EVERY = 0.05  # seconds between two measurements while they are cheap: a writer at 500 MB/s gets 25 MB in between
QUIET = 0.25  # ... and at most this long, however slowly the replicas write
SENTINEL = 0.01  # seconds between two looks at the free space in between: about 1% of a core
SHARE = 0.05  # at most this share of one core: a scan that took t seconds waits t / SHARE before the next
MAX_ENTRIES = 200_000  # files and folders one scan looks at; more fail the run
FIRST_WAIT = 5.0  # seconds the supervisor waits for an attempt's first measurement, at most
DEFAULT_FLOOR_MB = 1024  # free space orch keeps on the runs' disk; ORCH_DISK_FLOOR_MB changes it


def interval(scan_seconds: float, headroom: Optional[int] = None, rate: float = 0.0) -> float:
    """Seconds from one scan to the next. As often as SHARE of a core allows (a scan that took t waits at least
    t / SHARE), and within that: EVERY while the replicas write; a quarter of the time the write ``rate`` (bytes per
    second) needs to eat the ``headroom`` left under the limit, when that is sooner; QUIET while nothing grows."""
    cost = scan_seconds / SHARE
    if rate <= 0:
        return max(cost, QUIET if headroom is None or headroom > 0 else EVERY)
    wanted = EVERY if headroom is None else min(EVERY, max(headroom, 0) / rate / 4)
    return max(cost, wanted)


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
    if limit_mb and use.total >= limit_mb << 20:  # at the limit: a file the kernel capped there is at it exactly
        return (f"the replicas wrote {use.total / 2**20:,.0f} MiB or more into the run's folders (most in "
                f"{use.largest()}/, {use.written[use.largest()] / 2**20:,.0f} MiB), over --disk-limit {limit_mb} "
                "MiB; the replicas were stopped; raise --disk-limit if the job needs it")
    if use.free is not None and use.free < floor:
        return (f"the disk that holds the runs has {use.free / 2**20:,.0f} MiB free, below orch's floor of "
                f"{floor >> 20} MiB (ORCH_DISK_FLOOR_MB); the replicas were stopped so the host keeps working; "
                "free some space, or point ORCH_RUNS_DIR at a larger disk")
    return None


Stop = Callable[[], None]


class Guard:
    """Measures a run's folders from a thread of its own while an attempt runs, and at the first verdict
    (``verdict``: the limit, the files' count, the disk's floor) stops every writer at once: SIGKILL through the
    pidfds of the replicas' processes (``pids``: the backend's ``replica_pids``), so that no other process that takes
    a freed PID is ever signalled; ``fallback`` (a cancel with no grace) where it holds none. The guard starts before
    the replicas do; a second thread looks for their processes (an engine round trip each time) until it holds one
    pidfd per replica (``replicas``), then once a second, so the measurements never wait on the engine. The
    supervisor reads ``latest`` and ends the run with the verdict."""

    def __init__(self, run_path: Path, folders: list[str], limit_mb: int, pids: Callable[[], dict[str, int]],
                 fallback: Stop, replicas: int = 0) -> None:
        self.run_path, self.folders, self.limit_mb = run_path, folders, limit_mb
        self.pids, self.fallback = pids, fallback
        self.replicas = replicas
        self.latest: Optional[DiskUse] = None
        self._measured = threading.Condition()
        self._began: Optional[float] = None  # when the measurement in ``latest`` began (monotonic); None before one
        self.stopped_at: Optional[float] = None  # when the writers were stopped (monotonic), if they were
        self.causes: deque[str] = deque(maxlen=64)  # what brought on each recent scan: "start", "turn", "free space"
        # (the disk's free space fell), "asked" (measured_since, or the guard's end)
        self._done = threading.Event()
        self._wake = threading.Event()  # the next scan now: the guard ends, or the supervisor asks (measured_since)
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()  # over _fds: the opener adds, a stop signals, the end closes
        self.thread = threading.Thread(target=self._run, name="orch-disk-guard", daemon=True)
        self.opener = threading.Thread(target=self._open_while_running, name="orch-disk-guard-pids", daemon=True)

    def start(self) -> "Guard":
        self.thread.start()
        self.opener.start()
        return self

    def _open(self) -> None:
        """A pidfd for each replica's process not held yet: it names that process, never a later one of its PID."""
        try:
            pids = self.pids()
        except Exception:  # noqa: BLE001 - the engine's hiccup costs the fast stop, not the guard
            return
        for container, pid in pids.items():
            with self._lock:
                if container in self._fds or self._done.is_set():
                    continue
                try:
                    fd = os.pidfd_open(pid)
                except OSError:  # gone already
                    continue
                if _cgroup_names(pid, container):
                    self._fds[container] = fd
                else:  # the PID was taken by another process between the engine's answer and the open
                    os.close(fd)

    def _open_while_running(self) -> None:
        while not self._done.is_set() and self.stopped_at is None:
            self._open()
            with self._lock:
                missing = len(self._fds) < self.replicas
            self._done.wait(EVERY if missing else 1.0)  # replicas that start late: a slow engine, a restart by hand

    def _run(self) -> None:
        limit = self.limit_mb << 20 or None
        before: Optional[tuple[float, int]] = None
        cause = "start"
        while not self._done.is_set():
            self._wake.clear()  # a wish made from here on is met by this scan, which begins after it
            self.causes.append(cause)
            began, took = time.monotonic(), time.perf_counter()
            use = measure(self.run_path, self.folders, stop_at=limit)
            took = time.perf_counter() - took
            with self._measured:
                self.latest, self._began = use, began
                self._measured.notify_all()
            if verdict(use, self.limit_mb) is not None:
                self.stop_writers()
                return
            now = time.monotonic()
            rate = (use.total - before[1]) / (now - before[0]) if before and now > before[0] else 0.0
            before = (now, use.total)
            headroom = None if limit is None else limit - use.total
            cause = self._until_next(use, headroom, earliest=took / SHARE, latest=interval(took, headroom, rate))

    def _until_next(self, use: DiskUse, headroom: Optional[int], earliest: float, latest: float) -> str:
        """Wait for the next scan: ``latest`` seconds, or less once the disk's free space (one statvfs, a few
        microseconds) has fallen by a quarter of what is left under the limit or above the floor, but never less
        than ``earliest`` (the scan's cost). Writes into the page cache run at gigabytes a second: a replica that
        starts writing between two scans is seen within SENTINEL, not at the next scan. A wish for a measurement
        (``measured_since``) brings the next scan forward to ``earliest``. Returns what ended the wait."""
        if self._done.wait(earliest) or self._wake.is_set():
            return "asked"
        left = [headroom] if headroom is not None else []
        if use.free is not None:
            left.append(use.free - use.floor)
        if not left or use.free is None:  # no free space to watch: the next scan at its time
            return "asked" if self._wake.wait(max(latest - earliest, 0.0)) else "turn"
        trigger = max(min(left) // 4, 1 << 20)
        deadline = time.monotonic() + max(latest - earliest, 0.0)
        while not self._wake.is_set():
            now = time.monotonic()
            if now >= deadline:
                return "turn"
            self._wake.wait(min(SENTINEL, deadline - now))
            free = _free(self.run_path)
            if free is not None and use.free - free >= trigger:
                return "free space"
        return "asked"

    def measured_since(self, moment: float, timeout: float = FIRST_WAIT) -> Optional[DiskUse]:
        """The first measurement that began at ``moment`` (monotonic) or later, waiting up to ``timeout`` for it:
        what the replicas wrote before the supervisor's first look is judged, whenever the guard started. The guard
        scans as soon as its share of a core allows, not at its next turn."""
        self._wake.set()
        with self._measured:
            self._measured.wait_for(lambda: (self._began is not None and self._began >= moment) or
                                    self._done.is_set() or self.stopped_at is not None, timeout)
            return self.latest

    def stop_writers(self) -> None:
        """SIGKILL every replica's processes now (its PID namespace's first process: the kernel ends the rest)."""
        self.stopped_at = time.monotonic()
        with self._lock:
            missing = len(self._fds) < self.replicas
        if missing:
            self._open()  # a replica that started since the opener last looked
        signalled = False
        with self._lock:
            for fd in self._fds.values():
                try:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                    signalled = True
                except OSError:  # ended already, or not ours to signal
                    continue
        if not signalled:
            self.fallback()

    def stop(self) -> None:
        """End the guard (the attempt is over) and close its pidfds."""
        self._done.set()
        self._wake.set()
        for thread in (self.thread, self.opener):
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(5)
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


def _cgroup_names(pid: int, container: str) -> bool:
    """Whether process ``pid`` runs in the container ``container``: its cgroup path names the container's id whole
    (``/docker/<id>``, ``docker-<id>.scope``), not as a part of a longer hexadecimal name."""
    try:
        with open(f"/proc/{pid}/cgroup", "rb") as f:
            return names_container(f.read(1 << 16), container)
    except OSError:
        return False


def names_container(cgroup: bytes, container: str) -> bool:
    """Whether the text of a /proc/PID/cgroup names the container id ``container`` whole."""
    whole = rb"(?<![0-9a-f])" + re.escape(container.encode()) + rb"(?![0-9a-f])"
    return bool(container) and re.search(whole, cgroup) is not None
