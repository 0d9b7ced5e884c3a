"""A client attached to a supervised run: what its supervisor says, each replica's events, states and output as they
come, from any process, until the run ends; then its record.

The client holds no guarantee of the run: it reads what the supervisor writes into the run directory (supervisor.log,
replicas.json, run.json) and what the replicas write (their events), and follows the replicas' output from the
engine. Killing it changes nothing, and neither does a SIGTERM or SIGHUP (a closed terminal): the client leaves. Ctrl-C
in it asks the supervisor to interrupt the run and waits for the finish, as `orch up` always has; a second Ctrl-C asks
for the replicas' removal at once. A run whose supervisor is gone is
handed to ``adopt``, which starts a new one.
"""
from __future__ import annotations

import json
import os
import signal
import time
from typing import Any, Callable, Optional

from orchestrator.backends import Backend, ReplicaState, Status
from orchestrator.errors import RunNotFound
from orchestrator.run import logs
from orchestrator.run.lease import holder
from orchestrator.run.replicas import replica_of
from orchestrator.run.rundir import REPLICAS_FILE, SUPERVISOR_LOG, RunDir, RunInfo, read_json
from orchestrator.safeio import Tail

Say = Callable[[str], None]
OnEvent = Callable[[tuple[str, int], Any], None]
OnState = Callable[[ReplicaState], None]
POLL = 0.25  # seconds between two looks at the run directory


class Follower:
    """One client's view of a run: each call of ``step`` hands on what is new since the last."""

    def __init__(self, run: RunDir, backend: Backend, say: Say, on_event: OnEvent, on_line: Optional[logs.OnLine],
                 on_state: Optional[OnState], since: float) -> None:
        record = run.record()
        if record is None or record.spec is None:
            raise RunNotFound(f"no run {run.run_id!r} in {run.path.parent}; `orch ps` lists the runs")
        self.run, self.backend, self.say, self.on_event = run, backend, say, on_event
        self.on_line, self.on_state, self.since = on_line, on_state, since
        self.events = run.events(record.spec.replica_keys())
        self.said = Tail(run.path / SUPERVISOR_LOG)
        self.seen: dict[tuple[str, int], tuple[str, Status, Optional[int]]] = {}
        self.streamer: Optional[logs.Streamer] = None
        self.streamed: frozenset[str] = frozenset()

    def step(self) -> None:
        for line in self.said.read():
            try:
                message = json.loads(line)["say"]
            except (ValueError, KeyError, TypeError):
                continue
            self.say(str(message))
        for key, event in self.events.read():
            self.on_event(key, event)
        raw = read_json(self.run.path / REPLICAS_FILE)
        states = [s for s in map(replica_of, raw if isinstance(raw, list) else []) if s is not None]
        for s in states:
            if self.seen.get(s.key) != (s.id, s.status, s.exit_code):
                self.seen[s.key] = (s.id, s.status, s.exit_code)
                if self.on_state is not None:
                    self.on_state(s)
        ids = frozenset(s.id for s in states)
        if self.on_line is not None and ids and ids != self.streamed and any(s.status == Status.RUNNING
                                                                              for s in states):
            # A new attempt (a restart) has new replicas: their lines from the moment this client saw them.
            if self.streamer is not None:
                self.streamer.stop(wait=0)
                self.since = time.time()
            self.streamed = ids
            self.streamer = logs.Streamer(self.backend, states, self.on_line, since=self.since).start()

    def close(self) -> None:
        if self.streamer is not None:
            self.streamer.stop()


def follow(run: RunDir, backend: Backend, *, say: Say, on_event: OnEvent, on_line: Optional[logs.OnLine] = None,
           on_state: Optional[OnState] = None, adopt: Optional[Callable[[], int]] = None,
           since: Optional[float] = None, poll: float = POLL, clock: Any = time) -> RunInfo:
    """Show ``run`` as it goes until its supervisor has finished it, and return its record. A run with no supervisor
    left is adopted (``adopt`` starts one and returns its PID) and followed on; without ``adopt``, its record is
    returned as it is. KeyboardInterrupt is re-raised once the supervisor has finished the run it interrupted."""
    follower = Follower(run, backend, say, on_event, on_line, on_state, time.time() if since is None else since)
    interrupts = 0
    try:
        while True:
            try:
                follower.step()
                pid = holder(run.path)
                info = run.record()
                if info is None:
                    raise RunNotFound(f"run {run.run_id}'s record is gone from {run.path}")
                if pid is None:
                    if info.state.is_terminal or adopt is None:
                        follower.step()  # what the supervisor said and wrote last
                        break
                    say(f"run {run.run_id} has lost its supervisor; adopted by a new one (pid {adopt()})")
                clock.sleep(poll)
            except KeyboardInterrupt as exc:
                if type(exc) is not KeyboardInterrupt:  # SIGTERM or SIGHUP of this client: the run goes on
                    say(f"run {run.run_id} goes on under its supervisor; `orch attach {run.run_id}` follows it again")
                    raise
                interrupts += 1
                pid = holder(run.path)
                if pid:
                    os.kill(pid, signal.SIGINT)
                if interrupts == 1:
                    say("interrupting the run: its replicas are stopped and removed, what they wrote is kept "
                        "(Ctrl-C again removes them at once)")
    finally:
        follower.close()
    if interrupts:
        raise KeyboardInterrupt
    return info
