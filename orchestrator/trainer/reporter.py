"""The reporter every trainer shares: the job from the environment, events, heartbeats and results.

A framework's trainer does the training; this module does all the talking to orch, through the files
and fields ``contract.py`` names. Standard library only, so any framework's image can carry it.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from . import contract, rendezvous


def _json(payload: dict[str, Any], **options: Any) -> str:
    """``payload`` as strict JSON: a loss that is NaN (training diverged) or infinite is null, with the reason
    beside it (``contract.finite``), where NaN would make a strict parser refuse the whole record."""
    return json.dumps(contract.finite(payload), allow_nan=False, **options)


def stdout_lines(name: str, text: str) -> list[str]:
    """``text`` (one record of file ``name``, no newline) as report lines of at most STDOUT_LINE_LIMIT bytes."""
    text = text.encode("ascii", "backslashreplace").decode("ascii")  # one byte per character, so slices bound bytes
    room = contract.STDOUT_LINE_LIMIT - len(contract.STDOUT_PREFIX) - len(name) - 32  # the header, parts < 10**13
    parts = [text[i:i + room] for i in range(0, len(text), room)] or [""]
    return [f"{contract.STDOUT_PREFIX} {name} {i}/{len(parts)} {part}" for i, part in enumerate(parts, 1)]


class Reporter:
    """Writes structured events to the run directory (or, with ORCH_REPORT=stdout, as lines on stdout) and a
    readable line to stdout."""

    def __init__(self, out_dir: str, worker: int, role: str = "worker") -> None:
        self.worker = worker
        self.role = role
        self.out_dir = out_dir
        self.dir = os.path.join(out_dir, contract.replica_dir(role, worker))
        self.to_stdout = os.environ.get(contract.ENV_REPORT) == contract.REPORT_STDOUT
        os.makedirs(self.dir, exist_ok=True)
        self._events = None if self.to_stdout else open(os.path.join(self.dir, contract.EVENTS_FILE), "a", buffering=1)

    def _emit(self, name: str, text: str) -> None:
        # One write per line: a line is never torn by a thread printing between its text and its newline.
        for line in stdout_lines(name, text):
            sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def event(self, kind: str, **fields: Any) -> None:
        record = {"v": contract.CONTRACT_VERSION, "event": kind, "worker": self.worker, "time": time.time(), **fields}
        if kind in (contract.EVENT_START, contract.EVENT_DONE):  # the CPU this process has used so far: where a
            record["cpu_seconds"] = round(time.process_time(), 3)  # start-up's seconds go (benchmarks/floor.py)
        if self._events is None:
            self._emit(contract.EVENTS_FILE, _json(record, separators=(",", ":")))
        else:
            self._events.write(_json(record) + "\n")

    def heartbeat(self, now: float) -> None:
        if self.to_stdout:
            self._emit(contract.HEARTBEAT_FILE, f"{now:.3f}")
            return
        path = os.path.join(self.dir, contract.HEARTBEAT_FILE)
        with open(path + ".tmp", "w") as f:
            f.write(f"{now:.3f}\n")
        os.replace(path + ".tmp", path)

    def say(self, text: str) -> None:
        print(f"[orch] {text}", flush=True)

    def mark_done(self) -> None:
        """Tell the other replicas of this role, through the shared folder, that this one's result is written."""
        done = os.path.join(self.out_dir, contract.DONE_DIR)
        os.makedirs(done, exist_ok=True)
        path = os.path.join(done, contract.replica_dir(self.role, self.worker))
        with open(path + ".tmp", "w") as f:
            f.write(f"{time.time():.3f}\n")
        os.replace(path + ".tmp", path)

    def wait_for_results(self, num_workers: int, since: float, timeout: float = 60.0) -> bool:
        """Wait until every replica of this role has marked its result written in this attempt; False on timeout."""
        done = os.path.join(self.out_dir, contract.DONE_DIR)
        paths = [os.path.join(done, contract.replica_dir(self.role, w)) for w in range(num_workers)]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if all(os.stat(path).st_mtime >= since for path in paths):
                    return True
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        return False

    def write_json(self, name: str, payload: dict[str, Any]) -> None:
        if self.to_stdout:
            self._emit(name, _json(payload, separators=(",", ":")))
            return
        tmp = os.path.join(self.dir, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(_json(payload, indent=2))
        os.replace(tmp, os.path.join(self.dir, name))


def role_from_env() -> str:
    """This replica's role (worker unless the job has several roles)."""
    return os.environ.get(contract.ENV_ROLE, "worker")


def job_from_env() -> tuple[dict[str, Any], int, int, str, str]:
    """The training fields, this replica's index and its role's replica count, and the data and output folders."""
    rendezvous.derive(os.environ)  # a no-op unless one pod template serves every replica (Kubernetes)
    job = json.loads(os.environ[contract.ENV_JOB])
    missing = [k for k in contract.TRAINING_FIELDS if k not in job]  # a framework's own: its trainer reads them
    if missing:
        raise SystemExit(f"{contract.ENV_JOB} lacks {', '.join(missing)}")
    return (
        job,
        int(os.environ.get(contract.ENV_WORKER_INDEX, "0")),
        int(os.environ.get(contract.ENV_NUM_WORKERS, "1")),
        os.environ.get(contract.ENV_DATA_DIR, contract.DATA_MOUNT),
        os.environ.get(contract.ENV_OUT_DIR, contract.OUT_MOUNT),
    )
