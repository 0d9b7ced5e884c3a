"""The replicas as the supervisor last saw them (replicas.json), written for the clients attached to a run and read
back by them: engine-neutral ``ReplicaState`` records, so that a client follows a run without asking the engine."""
from __future__ import annotations

from typing import Any, Optional

from orchestrator.backends import ReplicaState, Status


def replica_record(s: ReplicaState) -> dict[str, Any]:
    return {"id": s.id, "name": s.name, "run": s.run, "role": s.role, "index": s.index, "status": s.status.value,
            "exit_code": s.exit_code, "oom_killed": s.oom_killed, "finished_at": s.finished_at, "reason": s.reason}


def replica_of(raw: Any) -> Optional[ReplicaState]:
    """The state a record of ``replica_record`` holds, or None if it is not one."""
    if not isinstance(raw, dict):
        return None
    try:
        code, ended = raw.get("exit_code"), raw.get("finished_at")
        return ReplicaState(id=str(raw["id"]), name=str(raw["name"]), run=str(raw["run"]), role=str(raw["role"]),
                            index=int(raw["index"]), status=Status(raw["status"]),
                            exit_code=code if isinstance(code, int) else None, oom_killed=raw.get("oom_killed") is True,
                            finished_at=float(ended) if isinstance(ended, (int, float)) else None,
                            reason=str(raw["reason"]) if raw.get("reason") is not None else None)
    except (KeyError, TypeError, ValueError):
        return None
