"""A run as run.json records it, `orch ps` lists it and ``up`` returns it: ``RunInfo`` and its ``RunState``, and how
one is read back from the record's JSON (``RunInfo.from_record``), a spec of an older orch's included."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Optional

from orchestrator.errors import InvalidSpec
from orchestrator.jobspec import JobSpec, load_spec, spec_from


class RunState(str, enum.Enum):
    """Where a run is; the value is what run.json and `orch ps` say."""

    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed-out"
    INTERRUPTED = "interrupted"
    STOPPED = "stopped"
    LOST = "lost"  # recorded as running, but its replicas are gone and nothing recorded an end
    UNKNOWN = "unknown"

    @property
    def is_terminal(self) -> bool:
        return self not in (RunState.STARTING, RunState.RUNNING, RunState.UNKNOWN)

    def __str__(self) -> str:
        return self.value


@dataclass
class RunInfo:
    """A run as run.json records it, `orch ps` lists it and ``up`` returns it."""

    run_id: str
    state: RunState
    spec: Optional[JobSpec]
    started: Optional[float] = None
    wall_seconds: Optional[float] = None
    error: Optional[str] = None
    workers: list[dict[str, Any]] = field(default_factory=list)
    run_dir: Optional[str] = None
    restarts: list[dict[str, Any]] = field(default_factory=list)
    supervisor_pid: Optional[int] = None  # the run's supervisor process (run/supervise.py); None once it has ended
    source: Optional[dict[str, Any]] = None  # a --script run's snapshot: where from, files, bytes, sha256
    failure: Optional[dict[str, Any]] = None  # how it failed, for a client to raise again (errors.to_record)
    disk_bound: Optional[str] = None  # what holds --disk-limit: "kernel" (run/volume.py), or "guard (why)"
    supervised: Optional[bool] = None  # as `orch ps` found it: a live supervisor holds it (None: not asked)

    @property
    def train_seconds(self) -> Optional[float]:
        """The slowest worker's train time: the job is done when the last worker is."""
        times = [w["train_seconds"] for w in self.workers if w.get("train_seconds") is not None]
        return max(times) if times else None

    @property
    def test_accuracy(self) -> Optional[float]:
        """Worker 0's test accuracy; in sync training every worker's agrees."""
        accs = [w["test_accuracy"] for w in self.workers if w.get("test_accuracy") is not None]
        return accs[0] if accs else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "state": self.state.value,
            "spec": self.spec.model_dump(mode="json") if self.spec is not None else {},
            "started": self.started,
            "wall_seconds": self.wall_seconds,
            "train_seconds": self.train_seconds,
            "test_accuracy": self.test_accuracy,
            "error": self.error,
            "workers": self.workers,
            "run_dir": self.run_dir,
            "restarts": self.restarts,
            "supervisor_pid": self.supervisor_pid,
            "source": self.source,
            "failure": self.failure,
            "disk_bound": self.disk_bound,
            "supervised": self.supervised,
        }

    @classmethod
    def from_record(cls, run_id: str, raw: Any, run_dir: str) -> Optional["RunInfo"]:
        """The record in ``raw`` (run.json's JSON) of run ``run_id``, or None if it is not one; a field of the wrong
        type is left at its default."""
        if not isinstance(raw, dict):
            return None
        try:
            state = RunState(raw.get("state", "unknown"))
        except ValueError:
            state = RunState.UNKNOWN
        pid, source, failure, bound = (raw.get(k) for k in ("supervisor_pid", "source", "failure", "disk_bound"))
        return cls(run_id=run_id, state=state, spec=spec_of(raw.get("spec")), started=raw.get("started"),
                   wall_seconds=raw.get("wall_seconds"), error=raw.get("error"), workers=raw.get("workers") or [],
                   run_dir=run_dir, restarts=raw.get("restarts") or [],
                   supervisor_pid=pid if isinstance(pid, int) else None,
                   source=source if isinstance(source, dict) else None,
                   failure=failure if isinstance(failure, dict) else None,
                   disk_bound=bound if isinstance(bound, str) else None)


def spec_of(record: Any) -> Optional[JobSpec]:
    """The spec a run record holds: nested as this orch writes it, or flat as orch wrote it before."""
    if not isinstance(record, dict) or not record:
        return None
    try:
        return load_spec(record)
    except InvalidSpec:
        try:
            return spec_from(record, given=())  # as it ran: a field it ignored is no error now
        except InvalidSpec:
            return None
