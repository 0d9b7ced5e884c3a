"""Test doubles for the run supervisor: a scripted backend that acts like replicas and their trainers, and a
clock that tests drive. No Docker, no sleeping.

A script is, per replica, a timeline of ``Step``s keyed by fake seconds since the attempt was launched
(``FakeBackend.apply``). The backend applies every step that is due whenever it is asked for ``states()``,
which the runner does once per poll, so the script advances with the ``FakeClock``:

    clock = FakeClock()
    backend = FakeBackend(clock, {0: trainer(), 1: trainer(stop_at=3) + [exits(3, 137)], 2: trainer()})

``FakeBackend(clock, [attempt1, attempt2])`` scripts a restart: the second ``apply`` starts the second
timeline. Keys are ``(role, index)`` or a bare index for the role ``worker``. A replica without a timeline
stays pending.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Union

from orchestrator import contract
from orchestrator.backends import Backend, Key, ReplicaState, Status
from orchestrator.docker.stats import usage_of
from orchestrator.run.records import parse_event, parse_result
from orchestrator.timestamps import format_timestamp
from orchestrator.usage import Usage

MiB = 2**20
START = 1_700_000_000.0  # the fake wall clock's epoch


class FakeClockOverrun(AssertionError):
    """The fake clock ran far past anything a test scripts: the loop under test never ends."""


class FakeClock:
    """``time``, ``monotonic`` and ``sleep`` as the runner uses them; ``sleep`` advances the clock at once."""

    def __init__(self, start: float = START, limit: float = 3600.0) -> None:
        self.start = start
        self.elapsed = 0.0
        self.limit = limit
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.start + self.elapsed

    def monotonic(self) -> float:
        return self.elapsed

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self.elapsed += seconds
        if self.elapsed > self.limit:
            raise FakeClockOverrun(f"the fake clock passed {self.limit:g} s: the run under test never ended")


# -- the script --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One thing a replica does at ``at`` fake seconds after its attempt was launched."""

    at: float
    kind: str  # status | vanish | event | raw-event | heartbeat | result | raw-result
    status: Optional[Status] = None
    exit_code: Optional[int] = None
    oom_killed: bool = False
    payload: Optional[dict[str, Any]] = None


def running(at: float) -> Step:
    return Step(at, "status", Status.RUNNING)


def paused(at: float) -> Step:
    return Step(at, "status", Status.PAUSED)


def resumes(at: float) -> Step:
    """``docker unpause``."""
    return Step(at, "status", Status.RUNNING)


def exits(at: float, code: int = 0, oom_killed: bool = False) -> Step:
    """The replica ends with ``code`` (0: succeeded); ``oom_killed`` as the kernel's OOM killer reports it."""
    return Step(at, "status", Status.SUCCEEDED if code == 0 else Status.FAILED, exit_code=code, oom_killed=oom_killed)


def vanishes(at: float) -> Step:
    """``docker rm -f`` from outside orch: the engine no longer lists the replica."""
    return Step(at, "vanish")


def event(at: float, kind: str, **fields: Any) -> Step:
    """An event the trainer appends to ``<role>-<i>/events.jsonl``; ``v``, ``worker`` and ``time`` are added."""
    return Step(at, "event", payload={"event": kind, **fields})


def raw_event(at: float, line: dict[str, Any]) -> Step:
    """A line written as is (e.g. of another contract version); ``worker`` and ``time`` are added if missing."""
    return Step(at, "raw-event", payload=line)


def stage(at: float, name: str, **fields: Any) -> Step:
    return event(at, contract.EVENT_START, stage=name, **fields)


def heartbeat(at: float, when: Optional[float] = None) -> Step:
    """The heartbeat file touched at ``at``; ``when`` forges its time (e.g. one in the future)."""
    return Step(at, "heartbeat", payload=None if when is None else {"time": when})


def heartbeats(start: float, stop: float, every: float = 1.0) -> list[Step]:
    """A heartbeat every ``every`` seconds from ``start`` up to, not including, ``stop``."""
    steps, t = [], start
    while t < stop - 1e-9:
        steps.append(heartbeat(t))
        t += every
    return steps


def result(at: float, **fields: Any) -> Step:
    """The trainer's ``result.json`` (merged over a plausible one)."""
    return Step(at, "result", payload=fields)


def raw_result(at: float, payload: dict[str, Any]) -> Step:
    """A result.json written as is (e.g. of another contract version)."""
    return Step(at, "raw-result", payload=payload)


def done(at: float, train_seconds: float = 4.0, test_accuracy: float = 0.9, **result_fields: Any) -> list[Step]:
    """What a trainer does when it finishes: result.json, then the done event."""
    return [result(at, train_seconds=train_seconds, test_accuracy=test_accuracy, **result_fields),
            event(at, contract.EVENT_DONE, train_seconds=train_seconds, test_accuracy=test_accuracy)]


def trainer(join: float = 1.0, epochs: int = 2, epoch_seconds: float = 2.0, exit_after: float = 0.5,
            exit_code: Optional[int] = 0, stop_at: Optional[float] = None, resumed_from: Optional[int] = None,
            test_accuracy: float = 0.9) -> list[Step]:
    """A healthy trainer: running at once, importing, connecting, joined ("training") at ``join``, a
    heartbeat a second and an epoch event every ``epoch_seconds``, then result.json and the done event,
    and an exit with ``exit_code`` ``exit_after`` seconds later (None: it never exits by itself, as a
    replica stuck in the framework's teardown). ``stop_at`` cuts the timeline there: nothing at or after
    it happens, to be followed by the test's own fault. ``resumed_from`` adds the resumed event of a
    restarted group and trains only the remaining epochs."""
    first = resumed_from or 1
    steps = [running(0.1), stage(0.2, "importing"), stage(0.5, "connecting"),
             stage(join, "training", steps_per_epoch=10)]
    if resumed_from:
        steps.append(event(join, contract.EVENT_RESUMED, epoch=resumed_from))
    t = join
    for n in range(first, epochs + 1):
        steps += heartbeats(t, t + epoch_seconds)
        t += epoch_seconds
        steps.append(event(t, contract.EVENT_EPOCH, epoch=n, epochs=epochs, loss=1.0 / n, accuracy=0.5 + n / 100,
                           val_loss=1.1 / n, val_accuracy=0.5 + n / 100, seconds=epoch_seconds, samples=100))
    steps += done(t, train_seconds=t - join, test_accuracy=test_accuracy,
                  resumed_from_epoch=resumed_from)
    if exit_code is not None:
        steps.append(exits(t + exit_after, exit_code))
    if stop_at is not None:
        steps = [s for s in steps if s.at < stop_at]
    return sorted(steps, key=lambda s: s.at)


def trainer_end(**kwargs: Any) -> float:
    """When ``trainer(**kwargs)`` writes its result."""
    join, epochs, seconds = kwargs.get("join", 1.0), kwargs.get("epochs", 2), kwargs.get("epoch_seconds", 2.0)
    return join + (epochs - (kwargs.get("resumed_from") or 1) + 1) * seconds


Script = dict[Union[Key, int], list[Step]]


def _key(k: Union[Key, int]) -> Key:
    return ("worker", k) if isinstance(k, int) else k


def canned_log(key: Key, attempt: int) -> list[str]:
    """What a replica printed: TensorFlow noise, and lines naming the replica and the attempt."""
    name = f"{key[0]}-{key[1]}"
    return [
        "I0000 00:00:1700000000.000000      12 cpu_feature_guard.cc:210] This TensorFlow binary is optimized",
        f"{name} attempt {attempt}: loading synthetic data",
        f"{name} attempt {attempt}: epoch 1/2 - loss 0.9",
        f"{name} attempt {attempt}: Traceback (most recent call last): boom",
    ]


# -- the backend -------------------------------------------------------------------------------------------
@dataclass
class _Replica:
    key: Key
    status: Status = Status.PENDING
    exit_code: Optional[int] = None
    oom_killed: bool = False
    finished_at: Optional[float] = None


@dataclass
class Call:
    name: str
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


class FakeBackend(Backend):
    """Scripted replicas that write what a trainer writes; every call is recorded in ``calls``.

    ``states_raises``: (fake seconds on the clock, exception) pairs; each is raised once, by the first
    ``states()`` call at or after its time (two at one time: two successive calls raise). ``cancel_raises``
    and ``apply_raises``: exceptions (or None for a normal call) for successive calls. ``memory``: (used,
    limit) bytes per replica for ``stats_once`` (default 100 MiB of 2048 MiB). ``logs_text``: a replica's
    output instead of ``canned_log``. ``reports_on_stdout``: the replicas print their records as report lines on
    stdout (``ORCH_REPORT=stdout``), as on Swarm, instead of writing them into the run directory.
    """

    name = "fake"
    artifact_name = "fake.yml"

    def __init__(self, clock: FakeClock, script: Union[Script, list[Script], None] = None, *,
                 states_raises: Optional[list[tuple[float, BaseException]]] = None,
                 cancel_raises: Optional[list[Optional[BaseException]]] = None,
                 apply_raises: Optional[list[Optional[BaseException]]] = None,
                 preflight_error: Optional[BaseException] = None,
                 memory: Optional[dict[Union[Key, int], tuple[int, int]]] = None,
                 logs_text: Optional[dict[Union[Key, int], str]] = None,
                 reports_on_stdout: bool = False, part_size: int = 100) -> None:
        self.clock = clock
        # Like Swarm's replicas: records go to stdout as report lines (of at most part_size characters of
        # text), not into the run directory; log_lines serves them, and the runner copies them back.
        self.reports_on_stdout = reports_on_stdout
        self.part_size = part_size
        self.stdout: dict[Key, list[tuple[float, str]]] = {}
        self.extra_stdout: dict[Key, list[tuple[float, str]]] = {}  # lines a test plants
        scripts = script if isinstance(script, list) else [script or {}]
        self.scripts = [{_key(k): sorted(v, key=lambda s: s.at) for k, v in s.items()} for s in scripts]
        self.states_raises = sorted(states_raises or [], key=lambda pair: pair[0])
        self.cancel_raises = list(cancel_raises or [])
        self.apply_raises = list(apply_raises or [])
        self.preflight_error = preflight_error
        self.memory = {_key(k): v for k, v in (memory or {}).items()}
        self.logs_text = {_key(k): v for k, v in (logs_text or {}).items()}
        self.calls: list[Call] = []
        self.run_id: Optional[str] = None
        self.run_dir: Optional[Path] = None
        self.keys: list[Key] = []
        self.attempt = 0  # 1 after the first apply
        self.launched_at = 0.0  # clock.monotonic() at the last apply
        self.replicas: dict[Key, _Replica] = {}
        self.pending: list[tuple[Key, Step]] = []
        self.written: list[tuple[Key, dict[str, Any]]] = []  # every event line, as written

    # -- what tests read -----------------------------------------------------------------------------
    def called(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]

    @property
    def call_names(self) -> list[str]:
        return [c.name for c in self.calls]

    @property
    def cancels(self) -> list[int]:
        """The grace of each cancel, in order."""
        return [c.kwargs["grace"] for c in self.called("cancel")]

    # -- pure ----------------------------------------------------------------------------------------
    def addresses(self, spec: Any, keys: list[Key], port: int) -> dict[Key, str]:
        return {(role, index): f"{role}-{index}:{port}" for role, index in keys}

    def engine_name(self, run_id: str) -> str:
        return f"fake-{run_id}"

    def render(self, plan: Any) -> str:
        return json.dumps([r.name for r in plan.replicas])

    # -- the engine ----------------------------------------------------------------------------------
    def preflight(self, plan: Any) -> None:
        self.calls.append(Call("preflight", (plan.spec.run_id,)))
        if self.preflight_error is not None:
            raise self.preflight_error

    def stage(self, plan: Any, say: Any) -> None:
        self.calls.append(Call("stage", (plan.spec.run_id,)))

    def apply(self, plan: Any, artifact: Path) -> None:
        self.calls.append(Call("apply", (plan.spec.run_id, artifact), {"at": self.clock.monotonic()}))
        if self.apply_raises:
            error = self.apply_raises.pop(0)
            if error is not None:
                raise error
        self.run_id, self.run_dir = plan.spec.run_id, Path(plan.run_dir)
        self.keys = [r.key for r in plan.replicas]
        self.attempt += 1
        self.launched_at = self.clock.monotonic()
        script = self.scripts[self.attempt - 1] if self.attempt <= len(self.scripts) else {}  # beyond: pending
        unknown = set(script) - set(self.keys)
        assert not unknown, f"the script names replicas the plan does not have: {sorted(unknown)}"
        self.replicas = {key: _Replica(key) for key in self.keys}
        self.stdout = {}  # a new attempt's containers: their output starts afresh
        self.pending = sorted(((key, s) for key, steps in script.items() for s in steps), key=lambda p: p[1].at)

    def states(self, run_id: Optional[str] = None) -> list[ReplicaState]:
        self.calls.append(Call("states", (run_id,), {"at": self.clock.monotonic()}))
        if self.states_raises and self.states_raises[0][0] <= self.clock.monotonic():
            raise self.states_raises.pop(0)[1]
        self._advance()
        if run_id is not None and run_id != self.run_id:
            return []
        return [self._state(r) for _, r in sorted(self.replicas.items())]

    def logs(self, replica: ReplicaState, tail: Optional[int] = None) -> str:
        self.calls.append(Call("logs", (replica.label,), {"tail": tail}))
        lines = self._lines(replica)
        return "".join(line + "\n" for line in (lines[-tail:] if tail else lines))

    def log_lines(self, replica: ReplicaState, stream: str, follow: bool = False,
                  since: Optional[float] = None) -> Iterator[str]:
        self.calls.append(Call("log_lines", (replica.label, stream), {"since": since}))
        if stream != "stdout":
            return iter([])
        if not self.reports_on_stdout:
            t = self.clock.time()
            return iter([f"{format_timestamp(t + i / 1000)} {line}" for i, line in enumerate(self._lines(replica))])
        start = self.clock.start + self.launched_at
        lines = [(start + i / 1000, line) for i, line in enumerate(self._lines(replica))]
        lines += self.stdout.get(replica.key, []) + self.extra_stdout.get(replica.key, [])
        # The engine's `since` includes its own second; lines of one time come in the order printed.
        return iter([f"{format_timestamp(t)} {line}" for t, line in sorted(lines, key=lambda pair: pair[0])
                     if since is None or t >= since])

    def stats_stream(self, replica: ReplicaState) -> Iterator[Usage]:
        self.calls.append(Call("stats_stream", (replica.label,)))
        record = self._stats(replica)
        return iter([record] if record else [])

    def stats_once(self, replica: ReplicaState) -> Optional[Usage]:
        self.calls.append(Call("stats_once", (replica.label,)))
        return self._stats(replica)

    def cancel(self, run_id: str, artifact: Optional[Path], grace: int, clock: Any = None) -> None:
        self.calls.append(Call("cancel", (run_id, artifact), {"grace": grace, "at": self.clock.monotonic()}))
        error = self.cancel_raises.pop(0) if self.cancel_raises else None
        if error is not None:
            raise error
        if run_id == self.run_id:
            self.replicas.clear()  # stopped and removed; whatever the script had left will not happen
            self.pending = []

    # -- the replicas ----------------------------------------------------------------------------------
    def _state(self, r: _Replica) -> ReplicaState:
        role, index = r.key
        return ReplicaState(id=f"fake{self.attempt}-{role}-{index}", name=f"fake-{self.run_id}-{role}-{index}",
                            run=self.run_id or "", role=role, index=index, status=r.status, exit_code=r.exit_code,
                            oom_killed=r.oom_killed, finished_at=r.finished_at)

    def _lines(self, replica: ReplicaState) -> list[str]:
        text = self.logs_text.get(replica.key)
        return text.splitlines() if text is not None else canned_log(replica.key, self.attempt)

    def _stats(self, replica: ReplicaState) -> Optional[Usage]:
        r = self.replicas.get(replica.key)
        if r is None or r.status != Status.RUNNING:
            return None
        used, limit = self.memory.get(replica.key, (100 * MiB, 2048 * MiB))
        return usage_of(engine_stats(used, limit))

    def _advance(self) -> None:
        """Apply every step that is due."""
        elapsed = self.clock.monotonic() - self.launched_at
        while self.pending and self.pending[0][1].at <= elapsed + 1e-9:
            key, step = self.pending.pop(0)
            r = self.replicas.get(key)
            if r is None:
                continue  # vanished
            self._do(r, step, self.clock.start + self.launched_at + step.at)

    def print_record(self, key: Key, name: str, text: str, when: float) -> None:
        """A record as the trainer's reporter prints it with ORCH_REPORT=stdout: report lines of its text."""
        parts = [text[i:i + self.part_size] for i in range(0, len(text), self.part_size)] or [""]
        for i, part in enumerate(parts, 1):
            self.stdout.setdefault(key, []).append((when, f"{contract.STDOUT_PREFIX} {name} {i}/{len(parts)} {part}"))

    def _do(self, r: _Replica, step: Step, when: float) -> None:
        assert self.run_dir is not None
        folder = self.run_dir / f"{r.key[0]}-{r.key[1]}"
        if self.reports_on_stdout and step.kind in ("event", "raw-event", "heartbeat", "result", "raw-result"):
            self._print(r, step, when)
            return
        if step.kind == "status":
            r.status, r.exit_code, r.oom_killed = step.status, step.exit_code, step.oom_killed
            r.finished_at = when if step.status is not None and step.status.is_terminal else None
        elif step.kind == "vanish":
            del self.replicas[r.key]
        elif step.kind in ("event", "raw-event"):
            line = dict(step.payload or {})
            if step.kind == "event":
                line = {"v": contract.CONTRACT_VERSION, "worker": r.key[1], "time": when, **line}
                assert parse_event(line) is not None, f"the fake wrote an invalid event: {line}"
            else:
                line = {"worker": r.key[1], "time": when, **line}
            with open(folder / contract.EVENTS_FILE, "a") as f:
                f.write(json.dumps(line) + "\n")
            self.written.append((r.key, line))
        elif step.kind == "heartbeat":
            path = folder / contract.HEARTBEAT_FILE
            path.touch()
            stamp = (step.payload or {}).get("time", when)
            os.utime(path, (stamp, stamp))
        elif step.kind == "result":
            workers = len(self.keys)
            payload = {"v": contract.CONTRACT_VERSION, "worker": r.key[1], "num_workers": workers,
                       "replicas": workers, "global_batch": 96, "per_worker_batch": 96 // workers,
                       "steps_per_epoch": 10, "train_samples": 3840, "validation_samples": 960, "test_samples": 1200,
                       "epochs": [], "samples_per_epoch": [3840], **(step.payload or {})}
            assert parse_result(payload) is not None, f"the fake wrote an invalid result: {payload}"
            (folder / contract.RESULT_FILE).write_text(json.dumps(payload) + "\n")
        elif step.kind == "raw-result":
            (folder / contract.RESULT_FILE).write_text(json.dumps(step.payload) + "\n")
        else:
            raise ValueError(f"unknown step {step.kind!r}")


    def _print(self, r: _Replica, step: Step, when: float) -> None:
        """What _do writes into the run directory, printed as report lines instead."""
        if step.kind in ("event", "raw-event"):
            line = dict(step.payload or {})
            if step.kind == "event":
                line = {"v": contract.CONTRACT_VERSION, "worker": r.key[1], "time": when, **line}
            else:
                line = {"worker": r.key[1], "time": when, **line}
            self.written.append((r.key, line))
            self.print_record(r.key, contract.EVENTS_FILE, json.dumps(line, separators=(",", ":")), when)
        elif step.kind == "heartbeat":
            self.print_record(r.key, contract.HEARTBEAT_FILE, f"{(step.payload or {}).get('time', when):.3f}", when)
        else:
            payload = step.payload or {}
            if step.kind == "result":
                workers = len(self.keys)
                payload = {"v": contract.CONTRACT_VERSION, "worker": r.key[1], "num_workers": workers,
                           "replicas": workers, "global_batch": 96, "per_worker_batch": 96 // workers,
                           "steps_per_epoch": 10, "train_samples": 3840, "validation_samples": 960,
                           "test_samples": 1200, "epochs": [], "samples_per_epoch": [3840], **payload}
            self.print_record(r.key, contract.RESULT_FILE, json.dumps(payload, separators=(",", ":")), when)


def engine_stats(used: int, limit: int, cache: int = 8 * MiB) -> dict[str, Any]:
    """One Engine API stats record (cgroup v2 shape) of a container using ``used`` of ``limit`` bytes; the
    page cache in ``cache`` is reported in usage and excluded again by ``usage_of``, as by `docker stats`."""
    return {
        "read": "2026-11-21T13:01:05.664847057Z",
        "preread": "2026-11-21T13:01:04.661346775Z",
        "pids_stats": {"current": 23},
        "blkio_stats": {"io_service_bytes_recursive": [{"op": "read", "value": 4096}, {"op": "write", "value": 0}]},
        "cpu_stats": {"cpu_usage": {"total_usage": 1_936_547_853}, "system_cpu_usage": 3_033_860_000_000,
                      "online_cpus": 2},
        "precpu_stats": {"cpu_usage": {"total_usage": 989_353_732}, "system_cpu_usage": 3_031_880_000_000,
                         "online_cpus": 2},
        "memory_stats": {"usage": used + cache, "limit": limit, "stats": {"inactive_file": cache, "anon": used}},
        "networks": {"eth0": {"rx_bytes": 736, "tx_bytes": 512}},
    }
