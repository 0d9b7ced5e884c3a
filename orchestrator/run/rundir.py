"""The run directory: one typed handle on what a run wrote (record, plan, events, results, logs, stats).

``collect``, ``logs``, ``stats`` and ``experiments`` read runs through it; none of them needs the
supervisor. The run id is the folder's name.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional

from orchestrator import contract
from orchestrator.errors import ContractMismatch, DiskFull, InvalidSpec, OrchError, RunNotFound
from orchestrator.paths import Paths
from orchestrator.run.info import RunInfo as RunInfo, RunState as RunState  # the record's types, named from here too
from orchestrator.run.records import EpochEvent, Refused, Result, event_of, parse_event, result_of
from orchestrator.safeio import Tail, Unsafe, atomic_write, mtime, read_bounded, read_json_bounded, write_json
from orchestrator.safetext import one_line

if TYPE_CHECKING:
    from orchestrator.plan.model import Plan

RUN_FILE = "run.json"
PLAN_FILE = "plan.json"
REPLICAS_FILE = "replicas.json"  # the supervisor's latest view of the replicas, for the clients attached to it
SUPERVISOR_LOG = "supervisor.log"  # what the supervisor says, a line each, for the clients attached to it
LOGS_DIR = "logs"  # the replicas' saved output, <role>-<i>.log: written by orch, never mounted
RESULT_LIMIT = 1 << 20  # bytes of a result.json orch will read
# Bytes of a replica's events.jsonl orch reads, and writes where it copies them (run/copier.py). A trainer writes a
# few hundred bytes an epoch; past this the replica is marked, and the rest of its file is never read.
EVENTS_LIMIT = 64 << 20
# What run.json and `orch ps` keep of each worker's result.
RESULT_FIGURES = ("train_seconds", "test_accuracy", "samples_per_epoch", "steps_per_epoch", "replicas", "global_batch")
CONTAINER_UID = 1000  # replicas never run as root; a root host hands them their folders
Key = tuple[str, int]


def read_json(path: Path) -> Optional[Any]:
    """The JSON in ``path``, or None if it is missing, unreadable, not a regular file, or over 16 MiB."""
    return read_json_bounded(path, 16 << 20)


class EventTailer:
    """Reads the replicas' event files incrementally, as untrusted input: each file through a bounded
    ``Tail`` (no links, no FIFOs, no unbounded lines), each line validated, and each event attributed to
    the file it came from; an event that names another worker than its file's is dropped."""

    def __init__(self, run: "RunDir", keys: list[Key]) -> None:
        self.tails = {key: Tail(run.replica_dir(key) / contract.EVENTS_FILE, limit=EVENTS_LIMIT) for key in keys}

    def capped(self) -> dict[Key, str]:
        """The replicas whose events file grew past EVENTS_LIMIT, and what that left unread (one line each)."""
        return {key: capped_line(tail.unread) for key, tail in self.tails.items() if tail.capped}

    def read(self) -> list[tuple[Key, Any]]:
        """New complete events since the last call, as (replica, event), in time order."""
        out = []
        for key, tail in self.tails.items():
            for line in tail.read():
                try:
                    raw = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                event = parse_event(raw, f"an event of {key[0]}-{key[1]}")
                if event is not None and event.worker == key[1]:
                    out.append((key, event))
        return sorted(out, key=lambda pair: pair[1].time)


def size_text(size: int) -> str:
    """A limit in bytes, as people write it: 64 MiB, 16 KiB."""
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB" if size >= 1 << 10 else f"{size} bytes"


def capped_line(unread: int) -> str:
    """What a replica's events file past EVENTS_LIMIT means, in one line."""
    return (f"its {contract.EVENTS_FILE} passed orch's limit of {size_text(EVENTS_LIMIT)}"
            + (f"; the {unread:,} bytes past it were not read" if unread else ""))


@dataclass
class WorkerRecords:
    """One replica's records as ``collect`` keeps them, judged alone: what its summary needs, and no more.

    ``invalid`` is the first record that failed (one line); then nothing else of the replica's own figures is
    used, and the other replicas' stand. ``dropped`` counts the valid records the summary needs not (epochs past
    the job's), ``unread`` the bytes past EVENTS_LIMIT, which are never read."""

    key: Key
    epochs: dict[int, EpochEvent] = field(default_factory=dict)  # the last record of each of the job's epochs
    result: Optional[Result] = None
    invalid: Optional[str] = None
    records: int = 0  # valid records read
    dropped: int = 0
    unread: int = 0
    capped: Optional[str] = None

    def spoil(self, reason: str) -> None:
        """Mark the replica's figures invalid for ``reason`` (the first one stands)."""
        if self.invalid is None:
            self.invalid = one_line(reason, 300)
            self.epochs, self.result = {}, None


class RunDir:
    """One run's folder under the runs root."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.run_id = path.name
        self._ahead: dict[Key, tuple[float, float]] = {}  # a heartbeat time from the future, and when it was seen

    @classmethod
    def of(cls, paths: Paths, run_id: str) -> "RunDir":
        return cls(paths.runs / run_id)

    # -- layout -------------------------------------------------------------------------------
    def replica_dir(self, key: Key) -> Path:
        return self.path / f"{key[0]}-{key[1]}"

    @property
    def shared(self) -> Path:
        """The folder every replica of the run shares (checkpoints, result markers)."""
        return self.path / contract.SHARED_DIR

    def saved_log(self, key: Key) -> Path:
        return self.path / LOGS_DIR / f"{key[0]}-{key[1]}.log"

    def exists(self) -> bool:
        return (self.path / RUN_FILE).is_file()

    # -- creation -----------------------------------------------------------------------------
    def create(self, plan: "Plan") -> None:
        """Claim the run id, atomically (one mkdir), and make the folders the replicas write into, plus
        orch's own: the plan, its artifact and the logs folder. A run id another orch holds is refused
        and its folder left alone."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.path.mkdir()
        except FileExistsError:
            raise InvalidSpec(f"run_id: {self.run_id} is already used ({self.path}); pick another or omit --run-id")
        except OSError as exc:
            raise self._create_error(exc) from None
        try:
            (self.path / LOGS_DIR).mkdir()
            # A root host hands the replicas their folders: to the user they run as (plan.user, uid:gid).
            uid, _, gid = plan.user.partition(":")
            owner = (int(uid), int(gid)) if uid.isdigit() and gid.isdigit() else (CONTAINER_UID, CONTAINER_UID)
            for folder in [self.shared, *(self.replica_dir(r.key) for r in plan.replicas)]:
                folder.mkdir()
                if os.getuid() == 0:
                    os.chown(folder, *owner)
            atomic_write(self.path / plan.artifact_name, plan.artifact)
            write_json(self.path / PLAN_FILE, {k: v for k, v in plan.to_dict().items() if k != "artifact"})
        except OSError as exc:
            shutil.rmtree(self.path, ignore_errors=True)  # ours: nothing half-made is left behind
            raise self._create_error(exc) from None

    def _create_error(self, exc: OSError) -> OrchError:
        if exc.errno == errno.ENOSPC:
            return DiskFull(f"no space left in {self.path.parent}; free some, or point ORCH_RUNS_DIR elsewhere")
        return OrchError(f"cannot create the run directory {self.path}: {exc.strerror or exc}")

    # -- the record and the plan --------------------------------------------------------------
    def record(self) -> Optional[RunInfo]:
        """The run record, or None if there is none or it is not one."""
        return RunInfo.from_record(self.run_id, read_json(self.path / RUN_FILE), str(self.path))

    def write_record(self, info: RunInfo) -> None:
        write_json(self.path / RUN_FILE, info.to_dict())

    def plan_record(self) -> dict[str, Any]:
        """What apply recorded: backend, engine name and artifact; {} if nothing was."""
        raw = read_json(self.path / PLAN_FILE)
        return raw if isinstance(raw, dict) else {}

    def artifact(self) -> Optional[Path]:
        """The backend artifact apply ran (compose.yml), if it is there."""
        name = self.plan_record().get("artifact_file")
        path = self.path / Path(str(name)).name if name else self.path / "compose.yml"
        return path if path.is_file() else None

    # -- what the replicas wrote --------------------------------------------------------------
    def events(self, keys: list[Key]) -> EventTailer:
        return EventTailer(self, keys)

    def heartbeat(self, key: Key, now: Optional[float] = None) -> float:
        """When replica ``key`` last reported training progress (0 if it has not yet, or its heartbeat is
        not a regular file), never later than ``now`` (default: the clock).

        On every backend: a replica can set its heartbeat file's time (Compose), and the copier writes what a
        replica printed (Swarm, Kubernetes). A time from the future counts as the moment this handle first saw
        it, and stays that moment while the file keeps it, so a forged heartbeat cannot hide a stall."""
        beat = mtime(self.replica_dir(key) / contract.HEARTBEAT_FILE)
        now = time.time() if now is None else now
        if beat <= now:
            self._ahead.pop(key, None)
            return beat
        forged, seen = self._ahead.get(key, (None, now))
        if forged != beat:
            self._ahead[key] = (beat, now)
            return now
        return seen

    def result(self, key: Key, refused: Optional[list[str]] = None) -> Optional[Any]:
        """Replica ``key``'s validated result.json, or None (missing, unsafe, too large, invalid, or of
        another worker); the one-line reason a result that is there was refused goes to ``refused``."""
        raw = read_json_bounded(self.replica_dir(key) / contract.RESULT_FILE, RESULT_LIMIT)
        what = f"the result of {key[0]}-{key[1]}"
        try:
            result = None if raw is None else result_of(raw, what)
        except Refused as exc:
            result = None
            (refused if refused is not None else []).append(str(exc))
        if result is not None and result.worker != key[1]:
            (refused if refused is not None else []).append(f"{what} is refused: it names worker {result.worker}")
            return None
        return result

    def worker_records(self, key: Key, epochs: int, chunk: int = 1 << 20) -> WorkerRecords:
        """Replica ``key``'s events and result, judged alone (``WorkerRecords``), for a job of ``epochs`` epochs.

        The events file is read as a stream, ``chunk`` bytes at a time and never past EVENTS_LIMIT, and only the
        last record of each of the job's epochs is kept: time and memory do not grow with what the replica wrote.
        Any record that fails (not JSON, a line over 64 KiB, another contract version, a field missing, mistyped
        or out of range, another worker's) makes the replica's figures invalid, and reading stops there."""
        got = WorkerRecords(key)
        name = f"{key[0]}-{key[1]}"
        tail = Tail(self.replica_dir(key) / contract.EVENTS_FILE, max_read=chunk, limit=EVENTS_LIMIT)
        line_no = 0
        while got.invalid is None:
            before = tail.offset
            lines = tail.read()
            if tail.refused:
                got.spoil(f"{contract.EVENTS_FILE}: {tail.refused}")
            elif tail.too_long:
                got.spoil(f"{contract.EVENTS_FILE} holds a line longer than {tail.max_line >> 10} KiB")
            for line in lines if got.invalid is None else ():
                line_no += 1
                if not self._keep_event(got, line, epochs, f"record {line_no} of {name}'s {contract.EVENTS_FILE}"):
                    break
            if tail.offset == before:
                break
        got.unread = tail.unread
        if tail.capped:
            got.capped = capped_line(tail.unread)
        if got.invalid is None:
            self._keep_result(got, epochs)
        return got

    @staticmethod
    def _keep_event(got: WorkerRecords, line: bytes, epochs: int, what: str) -> bool:
        """Judge one line of ``got``'s events and keep what the summary needs; False once the replica is invalid."""
        try:
            event = event_of(json.loads(line), what)
        except (ValueError, RecursionError) as exc:  # Refused is a ValueError, and so is bad JSON
            got.spoil(str(exc) if isinstance(exc, Refused) else f"{what} is not JSON")
            return False
        except ContractMismatch as exc:
            got.spoil(exc.message)
            return False
        if event.worker != got.key[1]:
            got.spoil(f"{what} names worker {event.worker}")
            return False
        got.records += 1
        if isinstance(event, EpochEvent):
            if event.epoch > epochs:
                got.dropped += 1
            else:  # an epoch redone after a restart counts once, the last time
                kept = got.epochs.get(event.epoch)
                if kept is None or event.time >= kept.time:
                    got.epochs[event.epoch] = event
        return True

    def _keep_result(self, got: WorkerRecords, epochs: int) -> None:
        what = f"the result of {got.key[0]}-{got.key[1]}"
        try:
            data = read_bounded(self.replica_dir(got.key) / contract.RESULT_FILE, RESULT_LIMIT)
            result = None if data is None else result_of(json.loads(data), what)
        except Unsafe as exc:
            return got.spoil(f"{what} is refused: {exc}")
        except OSError as exc:
            return got.spoil(f"{what} cannot be read: {exc.strerror or exc}")
        except (ValueError, RecursionError) as exc:
            return got.spoil(str(exc) if isinstance(exc, Refused) else f"{what} is refused: not JSON")
        except ContractMismatch as exc:
            return got.spoil(exc.message)
        if result is not None and result.worker != got.key[1]:
            return got.spoil(f"{what} is refused: it names worker {result.worker}")
        if result is not None and (len(result.epochs) > epochs or len(result.samples_per_epoch) > epochs):
            got.dropped += max(len(result.epochs), len(result.samples_per_epoch)) - epochs
            result = result.model_copy(update={"epochs": result.epochs[:epochs],
                                               "samples_per_epoch": result.samples_per_epoch[:epochs]})
        got.result = result

    def results(self, keys: list[Key]) -> list[dict[str, Any]]:
        """Per-replica result figures (``{"role": r, "worker": i}`` and Nones where a replica wrote none)."""
        out = []
        for key in keys:
            result = self.result(key)
            out.append({"role": key[0], "worker": key[1], **{name: getattr(result, name, None) for name in RESULT_FIGURES},
                        "exit_code": None})
        return out

    def predictions(self, key: Key) -> Path:
        return self.replica_dir(key) / contract.PREDICTIONS_FILE


def runs_in(paths: Paths) -> Iterator[RunDir]:
    """Every run folder under the runs root, in name order."""
    if paths.runs.is_dir():
        for path in sorted(paths.runs.iterdir()):
            run = RunDir(path)
            if run.exists():
                yield run


def resolve(paths: Paths, run_id: Optional[str]) -> RunDir:
    """The run ``run_id``, or the newest run when it is None; RunNotFound otherwise."""
    if run_id is not None:
        run = RunDir.of(paths, run_id)
        if "/" in run_id or run_id in (".", "..") or not run.exists():
            raise RunNotFound(f"no run {run_id!r} in {paths.runs}; `orch ps` lists the runs")
        return run
    records = [(r, info) for r in runs_in(paths) if (info := r.record()) is not None]
    if not records:
        raise RunNotFound(f"no runs in {paths.runs} yet; start one with `orch up`")
    return max(records, key=lambda pair: (pair[1].started or 0, pair[0].run_id))[0]
