"""Per-replica resource samples from the backend's stats stream, and host samples from psutil, as CSV files."""
from __future__ import annotations

import csv
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Optional

import psutil

from orchestrator.backends import Backend, ReplicaState
from orchestrator.usage import Usage

STATS_FILE = "stats.csv"
HOST_FILE = "host.csv"


@dataclass(frozen=True)
class StatsSample:
    """One container's figures at one moment. CPU is in percent of one core (200 = two cores busy)."""

    time: float
    worker: int
    container: str
    cpu_percent: float
    mem_used_bytes: int
    mem_limit_bytes: int
    net_rx_bytes: int
    net_tx_bytes: int
    blk_read_bytes: int
    blk_write_bytes: int
    pids: int
    role: str = "worker"  # with ``worker`` (the index within the role), which replica this is
    mem_charged_bytes: int = 0  # everything charged to the cgroup: the working set and the page cache


STATS_FIELDS = [f.name for f in fields(StatsSample)]


def sample_of(usage: Usage, worker: int, container: str, now: float, role: str = "worker") -> StatsSample:
    """The row of ``stats.csv`` for one replica's ``usage`` at ``now``."""
    return StatsSample(time=now, worker=worker, container=container, role=role, **asdict(usage))


class Sampler:
    """Samples every replica of a run about once per ``interval`` while it runs.

    One thread per container reads the Engine's stats stream (one record a second); one thread
    samples the host with psutil on the same clock. With ``out_dir``, each sample is appended to
    ``stats.csv`` / ``host.csv`` and flushed at once, so a crash loses at most one interval.
    """

    def __init__(self, backend: Backend, out_dir: Optional[Path] = None, interval: float = 1.0) -> None:
        if interval < 1.0:
            raise ValueError("the Engine streams stats once a second; the interval must be at least 1 s")
        self.backend = backend
        self.interval = interval
        self.out_dir = out_dir
        self.latest: dict[tuple[str, int], StatsSample] = {}
        self.samples = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._files: list[Any] = []
        self._stats_writer: Optional[csv.DictWriter[str]] = None
        self._host_writer: Optional[Any] = None  # csv.writer's object, whose class the csv module does not name

    def start(self, replicas: list[ReplicaState]) -> "Sampler":
        """Start sampling ``replicas`` and the host."""
        if self.out_dir is not None:
            stats_file = open(self.out_dir / STATS_FILE, "a", newline="")
            host_file = open(self.out_dir / HOST_FILE, "a", newline="")
            self._files = [stats_file, host_file]
            self._stats_writer = csv.DictWriter(stats_file, fieldnames=STATS_FIELDS)
            if stats_file.tell() == 0:
                self._stats_writer.writeheader()
            self._host_writer = csv.writer(host_file)
            if host_file.tell() == 0:
                cores = psutil.cpu_count() or 1
                self._host_writer.writerow(["time", "cpu_percent", *[f"cpu{i}_percent" for i in range(cores)],
                                            "mem_used_bytes", "mem_total_bytes"])
        for r in replicas:
            self._spawn(f"orch-stats-{r.name}", self._sample_replica, r)
        self._spawn("orch-stats-host", self._sample_host)
        return self

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        threading.Thread(target=target, args=args, daemon=True, name=name).start()

    def _sample_replica(self, container: ReplicaState) -> None:
        last = 0.0
        for usage in self.backend.stats_stream(container):
            if self._stop.is_set():
                return
            now = time.time()
            if now - last < self.interval * 0.9:
                continue
            sample = sample_of(usage, container.index, container.name, now, container.role)
            last = now
            with self._lock:
                self.latest[container.key] = sample
                self.samples += 1
                if self._stats_writer is not None:
                    self._stats_writer.writerow(asdict(sample))
                    self._files[0].flush()

    def _sample_host(self) -> None:
        psutil.cpu_percent(percpu=True)  # the first call only sets the baseline
        while not self._stop.wait(self.interval):
            per_core = psutil.cpu_percent(percpu=True)
            memory = psutil.virtual_memory()
            with self._lock:
                if self._host_writer is not None:  # checked under the lock: stop() may just have closed it
                    self._host_writer.writerow([f"{time.time():.3f}", f"{sum(per_core):.1f}", *per_core,
                                                memory.total - memory.available, memory.total])
                    self._files[1].flush()

    def snapshot(self) -> dict[tuple[str, int], StatsSample]:
        """The latest sample of each container, by (role, index)."""
        with self._lock:
            return dict(self.latest)

    def stop(self) -> None:
        """Stop sampling and close the files; safe to call twice."""
        self._stop.set()
        # No waiting for the threads: a container thread can sit up to a second in the engine's stream
        # before it sees the flag, and every write checks, under the lock, that the files are still open.
        # Its stream ends when the container is removed, and so does the thread.
        with self._lock:
            for f in self._files:
                f.close()
            self._files = []
            self._stats_writer = self._host_writer = None


def read_samples(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``stats.csv`` with numbers as numbers.

    The file is an append-only log, flushed row by row: a crash of orch can cut its last row, so a row
    that does not parse is skipped rather than failing the reader."""
    if not path.is_file():
        return []
    out = []
    optional = {"role", "mem_charged_bytes"}  # columns newer than some files
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                out.append({k: (v if k in ("container", "role") else float(v) if k in ("time", "cpu_percent") else int(float(v)))
                            for k, v in row.items() if k in STATS_FIELDS and not (k in optional and not v)}
                           | {"role": row.get("role") or "worker"})
            except (TypeError, ValueError):
                continue
    return out
