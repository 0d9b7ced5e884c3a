"""One attempt of a run: its whole group launched once and watched, every poll, until ``decide``'s verdict is more
than wait (``Attempt.watch``); the disk guard of the attempt, its replicas' records copied where they print them, and
the failure raised with the failed replica's last meaningful lines."""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

from orchestrator.backends import Backend, ReplicaState, Status
from orchestrator.errors import JobTimedOut, WorkerFailed
from orchestrator.plan import Plan
from orchestrator.run import disk, logs, volume
from orchestrator.run.copier import ReportCopier
from orchestrator.run.replicas import replica_record
from orchestrator.run.rundir import REPLICAS_FILE, RunDir
from orchestrator.run.supervisor import (Decision, Memory, Observation, Verdict, Watch, blame_memory, decide,
                                         first_failure)
from orchestrator.safeio import write_json

Say = Callable[[str], None]
OnEvent = Callable[[tuple[str, int], Any], None]  # (role, index) and the event
OnState = Callable[[ReplicaState], None]  # a replica whose status or exit code changed


def meaningful_lines(text: str, count: int) -> list[str]:
    """The last ``count`` lines of a log, without the framework's start-up noise; a line ends at "\\n" only."""
    lines = [ln for ln in text.split("\n") if ln.strip() and not logs.is_noise(ln)]
    return lines[-count:]


RECENT_SAMPLE = 10.0  # seconds: a stats.csv row this fresh stands in for a one-shot reading that failed


def _memory(backend: Backend, states: list[ReplicaState],
            run: Optional[RunDir] = None) -> dict[tuple[str, int], Memory]:
    """The memory of each running replica, for a stall's diagnosis. A one-shot reading of a container starved at
    its limit can itself fail or time out; the run's own recent stats sample (host-written) then stands in."""
    out = {}
    last: dict[tuple[str, int], dict[str, Any]] = {}
    for s in states:
        usage = backend.stats_once(s) if s.status == Status.RUNNING else None
        if usage is not None:
            out[s.key] = Memory(usage.mem_used_bytes, usage.mem_charged_bytes, usage.mem_limit_bytes)
        elif s.status == Status.RUNNING and run is not None:
            if not last:
                from orchestrator.run.stats import STATS_FILE, read_samples

                for row in read_samples(run.path / STATS_FILE):
                    last[(row.get("role") or "worker", row["worker"])] = row
            sample = last.get(s.key)
            if sample is not None and time.time() - sample["time"] <= RECENT_SAMPLE:
                out[s.key] = Memory(sample["mem_used_bytes"], sample.get("mem_charged_bytes") or 0,
                                    sample["mem_limit_bytes"])
    return out


class Attempt:
    """One launch of the whole group, watched until the supervisor's verdict is more than ``wait``."""

    def __init__(self, p: Plan, backend: Backend, run: RunDir, on_event: OnEvent, poll: float, clock: Any,
                 on_state: Optional[OnState] = None, say: Say = lambda _msg: None) -> None:
        self.p, self.backend, self.run, self.on_event, self.poll, self.clock = p, backend, run, on_event, poll, clock
        self.on_state, self.say = on_state, say
        self.seen: dict[tuple[str, int], tuple[str, Any, Optional[int]]] = {}
        self.tailer = run.events(p.spec.replica_keys())
        # Where the replicas share no folder with orch, their records come as lines on stdout, copied into the
        # run directory here; everything below reads the run directory as it does for Compose.
        self.copier = (ReportCopier(backend, run, p.spec.replica_keys(), clock=clock)
                       if backend.reports_on_stdout else None)
        self._said: set[tuple[str, int]] = set()

    def capped(self) -> dict[tuple[str, int], str]:
        """The replicas whose record files passed orch's limits, as they were written or read: one line each."""
        return {**self.tailer.capped(), **(self.copier.capped if self.copier is not None else {})}

    def _read_events(self) -> tuple[Any, ...]:
        events = tuple(self.tailer.read())
        for key, event in events:
            self.on_event(key, event)
        for key, line in self.capped().items():  # said once, when it happens; run.json marks the replica
            if key not in self._said:
                self._said.add(key)
                self.say(f"{key[0]}-{key[1]}: {line}; orch reads no more of its records")
        return events

    def guard(self) -> disk.Guard:
        """The disk guard of this attempt, measuring from now and stopping every writer at the limit."""
        spec = self.p.spec
        folders = volume.folders(spec)
        return disk.Guard(self.run.path, folders, spec.disk_limit_mb, lambda: self.backend.replica_pids(spec.run_id),
                          lambda: self.backend.cancel(spec.run_id, self.p.artifact_file, grace=0),
                          replicas=len(folders) - 1).start()

    def watch(self, restarts: int, guard: disk.Guard) -> Decision:
        keys = self.p.spec.reporting_keys()
        clock = self.clock
        launched = clock.monotonic()
        state = Watch()
        guard.measured_since(time.monotonic())  # what a replica wrote before the first look is judged on it
        seen = None
        while True:
            if self.copier is not None:
                states = self.backend.states(self.p.spec.run_id)
                self.copier.pull(states)
            events = self._read_events()
            if self.copier is None:
                states = self.backend.states(self.p.spec.run_id)
            self._states_seen(states)
            now = clock.time()  # a heartbeat is never later than now (RunDir.heartbeat)
            if first_failure(states) is not None and self.p.spec.disk_limit_mb:
                # A writer the kernel's file size cap stopped fails on its own (a Python one with OSError: File
                # too large): what it wrote is measured again before its exit is judged.
                guard.measured_since(time.monotonic(), timeout=1.0)
            use = guard.latest if guard.latest is not seen else None  # each measurement judged once
            seen = guard.latest
            obs = Observation(states=tuple(states), events=events,
                              heartbeats={key: self.run.heartbeat(key, now) for key in keys},
                              now=now, elapsed=clock.monotonic() - launched, disk=use)
            decision = decide(self.p.spec, state, obs, restarts)
            if decision.verdict != Verdict.WAIT:
                if decision.stalled:
                    decision = blame_memory(decision, _memory(self.backend, states, self.run))
                if self.copier is not None:
                    self.copier.pull(states, force=True)
                self._read_events()
                return decision
            state = decision.watch
            clock.sleep(self.poll)

    def _states_seen(self, states: list[ReplicaState]) -> None:
        """Hand ``on_state`` each replica whose status or exit code changed since the last poll, and write the
        replicas as they are now into replicas.json when one did, for the clients attached to the run."""
        changed = [s for s in states if self.seen.get(s.key) != (s.id, s.status, s.exit_code)]
        for s in changed:
            self.seen[s.key] = (s.id, s.status, s.exit_code)
            if self.on_state is not None:
                self.on_state(s)
        if changed:
            write_json(self.run.path / REPLICAS_FILE, [replica_record(s) for s in states])


def raise_for(decision: Decision, backend: Backend) -> None:
    if decision.verdict == Verdict.TIMED_OUT:
        raise JobTimedOut(decision.message)
    details = ""
    if decision.failed is not None:
        try:
            details = "\n".join(meaningful_lines(backend.logs(decision.failed, tail=200), 15))
        except Exception:  # noqa: BLE001 - the failure matters more than its last log lines
            details = ""
    raise WorkerFailed(decision.replica[1] if decision.replica else -1, decision.exit_code, decision.message,
                       details=details, retryable=decision.retryable)
