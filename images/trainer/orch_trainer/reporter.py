"""The reporter every trainer shares: the job from the environment, events, heartbeats and results.

A framework's trainer does the training; this module does all the talking to orch, through the files
and fields ``contract.py`` names. Standard library only, so any framework's image can carry it.
"""
from __future__ import annotations

import json
import os
import time

from . import contract


class Reporter:
    """Writes structured events to the run directory and a readable line to stdout."""

    def __init__(self, out_dir: str, worker: int) -> None:
        self.worker = worker
        self.out_dir = out_dir
        self.dir = os.path.join(out_dir, contract.worker_dir(worker))
        os.makedirs(self.dir, exist_ok=True)
        self._events = open(os.path.join(self.dir, contract.EVENTS_FILE), "a", buffering=1)

    def event(self, kind: str, **fields) -> None:
        record = {"v": contract.CONTRACT_VERSION, "event": kind, "worker": self.worker, "time": time.time(), **fields}
        self._events.write(json.dumps(record) + "\n")

    def heartbeat(self, now: float) -> None:
        path = os.path.join(self.dir, contract.HEARTBEAT_FILE)
        with open(path + ".tmp", "w") as f:
            f.write(f"{now:.3f}\n")
        os.replace(path + ".tmp", path)

    def say(self, text: str) -> None:
        print(f"[orch] {text}", flush=True)

    def mark_done(self) -> None:
        """Tell the other workers, through the shared folder, that this worker's result is written."""
        done = os.path.join(self.out_dir, contract.DONE_DIR)
        os.makedirs(done, exist_ok=True)
        path = os.path.join(done, contract.worker_dir(self.worker))
        with open(path + ".tmp", "w") as f:
            f.write(f"{time.time():.3f}\n")
        os.replace(path + ".tmp", path)

    def wait_for_results(self, num_workers: int, since: float, timeout: float = 60.0) -> bool:
        """Wait until every worker has marked its result written in this attempt; False on timeout."""
        done = os.path.join(self.out_dir, contract.DONE_DIR)
        paths = [os.path.join(done, contract.worker_dir(w)) for w in range(num_workers)]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if all(os.stat(path).st_mtime >= since for path in paths):
                    return True
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        return False

    def write_json(self, name: str, payload: dict) -> None:
        tmp = os.path.join(self.dir, name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(payload, f, indent=2)
        os.replace(tmp, os.path.join(self.dir, name))


def job_from_env() -> tuple[dict, int, int, str, str]:
    """The training fields, this worker's index, the number of workers, and the data and output folders."""
    job = json.loads(os.environ[contract.ENV_JOB])
    missing = [k for k in contract.TRAINING_FIELDS if k not in job]
    if missing:
        raise SystemExit(f"{contract.ENV_JOB} lacks {', '.join(missing)}")
    return (
        job,
        int(os.environ.get(contract.ENV_WORKER_INDEX, "0")),
        int(os.environ.get(contract.ENV_NUM_WORKERS, "1")),
        os.environ.get(contract.ENV_DATA_DIR, contract.DATA_MOUNT),
        os.environ.get(contract.ENV_OUT_DIR, contract.OUT_MOUNT),
    )
