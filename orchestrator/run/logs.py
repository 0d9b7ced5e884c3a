"""Worker logs as streams of records: from live containers, or saved in the run directory."""
from __future__ import annotations

import functools
import queue
import re
import shutil
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Callable, Iterable, Iterator, Optional

from orchestrator.backends import Backend, ReplicaState
from orchestrator.run.rundir import RunDir
from orchestrator.safeio import atomic_write_with
from orchestrator.timestamps import format_timestamp, parse_timestamp

# A record on stdout (ORCH_REPORT=stdout), copied into the run directory: hidden like the frameworks' noise.
_RECORD_LINE = r"@orch \S+ \d+/\d+ "


def _noise() -> re.Pattern[str]:
    """Lines `orch logs` hides unless --all: every registered framework's start-up chatter
    (``Framework.log_noise``) and the report lines of replicas that print their records on stdout."""
    from orchestrator import frameworks

    return _noise_of(frameworks.names())


@functools.lru_cache(maxsize=4)
def _noise_of(names: tuple[str, ...]) -> re.Pattern[str]:
    """One pattern per set of frameworks: compiled once, again only when a framework registers."""
    from orchestrator import frameworks

    patterns = [p for name in names for p in frameworks.get(name).log_noise]
    return re.compile("^(?:" + "|".join([*patterns, _RECORD_LINE]) + ")")


@dataclass(frozen=True)
class LogRecord:
    """One line a replica wrote."""

    worker: int  # the replica's index within its role
    stream: str  # stdout or stderr
    time: float  # Unix seconds, from the engine's timestamp
    line: str
    role: str = "worker"

    @property
    def replica(self) -> str:
        return f"{self.role}-{self.worker}"


def is_noise(line: str) -> bool:
    """Whether ``line`` is TensorFlow start-up noise that `orch logs` hides unless asked."""
    return bool(_noise().match(line))


def parse_engine_line(raw: str, worker: int, stream: str, role: str = "worker") -> Optional[LogRecord]:
    """A record from a line the engine returned with ``timestamps=True``."""
    stamp, _, line = raw.partition(" ")
    try:
        return LogRecord(worker, stream, parse_timestamp(stamp), line, role)
    except ValueError:
        return None


def parse_saved_line(raw: str, worker: int, role: str = "worker") -> Optional[LogRecord]:
    """A record from a line of a saved log (``logs/<role>-<i>.log``)."""
    parts = raw.split(" ", 2)
    if len(parts) < 2 or parts[1] not in ("stdout", "stderr"):
        return None
    try:
        return LogRecord(worker, parts[1], parse_timestamp(parts[0]), parts[2] if len(parts) > 2 else "", role)
    except ValueError:
        return None


def format_saved_line(record: LogRecord) -> str:
    """The line ``parse_saved_line`` reads back."""
    return f"{format_timestamp(record.time)} {record.stream} {record.line}"


def replica_records(backend: Backend, replica: ReplicaState) -> list[LogRecord]:
    """Every line a replica has written so far, in time order."""
    records = []
    for stream in ("stdout", "stderr"):
        for raw in backend.log_lines(replica, stream):
            record = parse_engine_line(raw, replica.index, stream, replica.role)
            if record is not None:
                records.append(record)
    return sorted(records, key=lambda r: r.time)


def save(backend: Backend, run: RunDir, replicas: Iterable[ReplicaState], append: bool = False) -> None:
    """Write each replica's log to the run's ``logs/<role>-<i>.log``, orch's own folder that no replica
    can write to, so it outlives the replica. Written whole and then renamed: never half a file.

    With ``append`` (before a restart replaces the replicas) earlier attempts' lines are kept.
    """
    for r in replicas:
        if r.index < 0:
            continue
        path = run.saved_log(r.key)

        def write(f: IO[bytes], replica: ReplicaState = r, path: Path = path) -> None:
            if append and path.is_file():
                with open(path, "rb") as before:
                    shutil.copyfileobj(before, f)
            for record in replica_records(backend, replica):
                f.write((format_saved_line(record) + "\n").encode("utf-8", "replace"))

        atomic_write_with(path, write)


def saved_records(run: RunDir, keys: list[tuple[str, int]]) -> list[LogRecord]:
    """The saved logs of a finished run, merged in time order (read line by line).

    A line ends at "\\n" only, as the engine's lines do: a "\\r" (or any other break ``str.splitlines`` knows)
    inside a container's line stays in it, and cannot start a record of a time and stream of its choosing."""
    records = []
    for role, index in keys:
        path = run.saved_log((role, index))
        if path.is_file():
            with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
                for raw in f:
                    record = parse_saved_line(raw.removesuffix("\n"), index, role)
                    if record is not None:
                        records.append(record)
    return sorted(records, key=lambda r: r.time)


@dataclass(frozen=True)
class LogFilter:
    """What `orch logs` shows."""

    workers: frozenset[int] = frozenset()  # empty: all
    grep: Optional[re.Pattern[str]] = None
    since: Optional[float] = None  # Unix seconds
    show_noise: bool = False

    def keep(self, record: LogRecord) -> bool:
        return (
            (not self.workers or record.worker in self.workers)
            and (self.show_noise or not is_noise(record.line))
            and (self.since is None or record.time >= self.since)
            and (self.grep is None or bool(self.grep.search(record.line)))
        )


def select(records: Iterable[LogRecord], selection: LogFilter, tail: Optional[int] = None) -> list[LogRecord]:
    """Filter ``records``; with ``tail``, keep the last ``tail`` lines of each worker."""
    kept = [r for r in records if selection.keep(r)]
    if tail is None:
        return kept
    per_worker: dict[int, list[LogRecord]] = {}
    for r in kept:
        per_worker.setdefault(r.worker, []).append(r)
    last = {id(r) for rs in per_worker.values() for r in rs[-tail:]} if tail > 0 else set()
    return [r for r in kept if id(r) in last]


def follow(backend: Backend, replicas: list[ReplicaState], since: float) -> Iterator[LogRecord]:
    """Stream new lines from running replicas, as they come, until every replica has stopped."""
    pending: queue.Queue[object] = queue.Queue()
    done = object()

    def pump(replica: ReplicaState, stream: str) -> None:
        try:
            for raw in backend.log_lines(replica, stream, follow=True, since=since):
                record = parse_engine_line(raw, replica.index, stream, replica.role)
                if record is not None:
                    pending.put(record)
        finally:
            pending.put(done)

    threads = [threading.Thread(target=pump, args=(r, s), daemon=True) for r in replicas for s in ("stdout", "stderr")]
    for t in threads:
        t.start()
    remaining = len(threads)
    while remaining:
        item = pending.get()
        if item is done:
            remaining -= 1
        elif isinstance(item, LogRecord):
            yield item


OnLine = Callable[[LogRecord], None]


class Streamer:
    """Every replica's lines as they are written, handed to ``on_line`` in the order they arrive, from a thread of
    its own, until the replicas stop (``orch up`` shows them live, as ``docker compose up`` does). The frameworks'
    start-up noise and the report lines of replicas that print their records are left out; the saved logs keep
    everything."""

    def __init__(self, backend: Backend, replicas: list[ReplicaState], on_line: OnLine, since: float) -> None:
        self.backend, self.replicas, self.on_line, self.since = backend, replicas, on_line, since
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="orch-live-logs", daemon=True)

    def start(self) -> "Streamer":
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            for record in follow(self.backend, self.replicas, self.since):
                if self.stopped.is_set():
                    return
                if not is_noise(record.line):
                    self.on_line(record)
        except Exception:  # noqa: BLE001 - the live view is a view: the run and its saved logs go on without it
            return

    def stop(self, wait: float = 2.0) -> None:
        """Wait up to ``wait`` seconds for the lines the replicas wrote last, then hand on no more."""
        self.thread.join(wait)
        self.stopped.set()


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")


def parse_since(text: str, now: Optional[float] = None) -> float:
    """Unix seconds from a duration ago (``90s``, ``5m``, ``2h``, ``1d``) or an ISO 8601 time."""
    now = time.time() if now is None else now
    match = _DURATION.match(text.strip())
    if match:
        return now - float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--since: {text!r} is neither a duration like 5m nor an ISO time like 2026-11-21T12:00:00")
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return moment.timestamp()
