"""Report lines on the replicas' stdout, copied into the run directory, for backends that share no folder.

A backend whose replicas report on stdout (``Backend.reports_on_stdout``) leaves no events, heartbeats or
results in the replicas' folders. ``ReportCopier.pull`` reads the new lines of each replica's stdout through the
backend's log API and writes the records they carry where a replica on Compose writes them itself: events
appended to ``events.jsonl``, the heartbeat rewritten with its time as the file's modification time, and
``result.json`` written whole. ``RunDir``, ``records.py``, the supervisor and ``collect`` then read them unchanged.

The lines are untrusted input: only those files (and a function job's return record) are written (``stdout_reports``), a line or record over its
bound is dropped, an events file stops growing at a limit, a heartbeat from the future counts as now, and no file
is opened through a link or waited on (``safeio``: a FIFO planted in a replica's folder is refused).
"""
from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from orchestrator import contract
from orchestrator.backends import Backend, Key, ReplicaState
from orchestrator.run.rundir import EVENTS_LIMIT, RESULT_LIMIT, RunDir, size_text
from orchestrator.run.stdout import FUNCTION_RETURN_FILE, Assembler
from orchestrator.safeio import Unsafe, append_bounded, atomic_write

LINE_LIMIT = contract.STDOUT_LINE_LIMIT + 64  # a report line with the engine's timestamp in front
EVENT_LIMIT = 64 << 10  # bytes of one event, as the event tailer reads them
EVENTS_FILE_LIMIT = EVENTS_LIMIT  # bytes an events.jsonl may grow to: what orch reads of one
PULL_INTERVAL = 1.0  # seconds between two reads of the same replica's output


def stamp_ns(stamp: str) -> Optional[int]:
    """Unix nanoseconds of an engine timestamp (RFC 3339, UTC, up to nine fractional digits), or None."""
    from orchestrator.timestamps import parse_timestamp

    whole, _, frac = stamp.rstrip("Z").partition(".")
    if not frac.isdigit() and frac:
        return None
    try:
        seconds = parse_timestamp(whole + "Z")
    except ValueError:
        return None
    return int(seconds) * 1_000_000_000 + int((frac + "000000000")[:9] or 0)


def _events_full() -> str:
    return (f"its {contract.EVENTS_FILE} reached orch's limit of {size_text(EVENTS_FILE_LIMIT)}; the records after "
            "it were not copied")


@dataclass
class _Cursor:
    """How far one replica's stdout has been read, in one attempt (one replica id)."""

    replica_id: str
    last_ns: int = -1  # the newest line's time
    at_last: int = 0  # lines of exactly that time already read (the engine's `since` includes them again)
    assembler: Assembler = field(default_factory=Assembler)
    finished: bool = False  # the replica had ended when its output was last read: nothing more will come


class ReportCopier:
    """Copies the records on each replica's stdout into its folder of ``run``."""

    def __init__(self, backend: Backend, run: RunDir, keys: Iterable[Key], clock: Any = time,
                 interval: float = PULL_INTERVAL) -> None:
        self.backend, self.run, self.keys, self.clock, self.interval = backend, run, set(keys), clock, interval
        self.cursors: dict[Key, _Cursor] = {}
        self._last_pull: Optional[float] = None
        self.capped: dict[Key, str] = {}  # replicas whose records passed a limit, and which: one line each

    def pull(self, states: Iterable[ReplicaState], force: bool = False) -> None:
        """Copy what each replica in ``states`` printed since the last pull; at most once per ``interval`` unless
        ``force`` (before a verdict, and before the replicas are removed)."""
        now = self.clock.monotonic()
        if not force and self._last_pull is not None and now - self._last_pull < self.interval:
            return
        self._last_pull = now
        for state in states:
            if state.key in self.keys:
                try:
                    self._pull(state, force)
                except OSError:
                    continue  # e.g. the replica's folder is gone: its records have nowhere to go

    def _pull(self, state: ReplicaState, force: bool) -> None:
        cursor = self.cursors.get(state.key)
        if cursor is None or cursor.replica_id != state.id:  # a new attempt's replica: its output starts afresh
            cursor = self.cursors[state.key] = _Cursor(state.id)
        if cursor.finished and not force:
            return
        ended = state.status.is_terminal
        since = cursor.last_ns // 1_000_000_000 if cursor.last_ns > 0 else None  # whole seconds: `since` includes them
        seen_at_last = 0
        for raw in self.backend.log_lines(state, "stdout", since=since):
            stamp, _, line = raw.partition(" ")
            ns = stamp_ns(stamp)
            if ns is None or ns < cursor.last_ns:
                continue
            if ns == cursor.last_ns:
                seen_at_last += 1
                if seen_at_last <= cursor.at_last:
                    continue  # read before
                cursor.at_last += 1
            else:
                cursor.last_ns, cursor.at_last, seen_at_last = ns, 1, 1
            if len(line) > LINE_LIMIT:
                continue
            record = cursor.assembler.feed(line)
            if record is not None:
                self._write(state.key, *record)
        cursor.finished = ended

    def rebuild(self, states: Iterable[ReplicaState]) -> None:
        """Write each replica's records anew from the whole of its stdout, for a run no supervisor watches (its own
        died): reading everything each time, and replacing ``events.jsonl`` whole, makes a second call change nothing."""
        for state in states:
            if state.key not in self.keys:
                continue
            assembler, events, size = Assembler(), [], 0
            try:
                for raw in self.backend.log_lines(state, "stdout"):
                    _stamp, _, line = raw.partition(" ")
                    record = assembler.feed(line) if len(line) <= LINE_LIMIT else None
                    if record is None:
                        continue
                    name, text = record
                    if name == contract.EVENTS_FILE:
                        if len(text) <= EVENT_LIMIT and size + len(text) + 1 <= EVENTS_FILE_LIMIT:
                            events.append(text)
                            size += len(text) + 1
                        elif len(text) <= EVENT_LIMIT:
                            self._cap(state.key, _events_full())
                    else:
                        self._write(state.key, name, text)
                if events:
                    atomic_write(self.run.replica_dir(state.key) / contract.EVENTS_FILE, "\n".join(events) + "\n")
            except OSError:
                continue  # e.g. the replica's folder is gone: its records have nowhere to go

    def _cap(self, key: Key, line: str) -> None:
        self.capped.setdefault(key, line)

    def _write(self, key: Key, name: str, text: str) -> None:
        folder = self.run.replica_dir(key)
        if name == contract.EVENTS_FILE:
            if len(text) <= EVENT_LIMIT:
                with contextlib.suppress(Unsafe):  # a FIFO or link planted there: refused, never waited on
                    if not append_bounded(folder / name, (text + "\n").encode("utf-8", "replace"), EVENTS_FILE_LIMIT):
                        self._cap(key, _events_full())
        elif name == contract.HEARTBEAT_FILE:
            self._heartbeat(folder / name, text)
        elif name == FUNCTION_RETURN_FILE:  # what a function job's call returned, whole (run/function.py)
            atomic_write(folder / name, text)
        elif name == contract.RESULT_FILE:
            if len(text) <= RESULT_LIMIT:
                atomic_write(folder / name, text + "\n")
            else:
                self._cap(key, f"its {contract.RESULT_FILE} was over orch's limit of {size_text(RESULT_LIMIT)}, "
                               "and was not copied")

    def _heartbeat(self, path: Path, text: str) -> None:
        """The heartbeat file with the replica's time as its modification time, which is what RunDir reads;
        a time ahead of orch's clock counts as now, so a replica cannot hide a stall."""
        try:
            when = float(text)
        except ValueError:
            return
        if not math.isfinite(when) or when <= 0:
            return
        when = min(when, self.clock.time())
        atomic_write(path, f"{when:.3f}\n")
        with contextlib.suppress(OSError):
            os.utime(path, (when, when), follow_symlinks=False)
