"""The runs a host has: list them, take them down, and read their logs and live stats.

Runs are found two ways: their folders under the runs root, and their replicas on the engine (by the
``orch.run`` label). A run still up is judged by its replicas; one that is not, by its record.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any, Callable, Generator, Iterator, Optional

from orchestrator import backends
from orchestrator.backends import Backend, ReplicaState, Status
from orchestrator.errors import EngineUnreachable, InvalidSpec, OrchError, RunNotFound
from orchestrator.paths import Paths, default_paths
from orchestrator.run import logs, volume
from orchestrator.run.lease import holder
from orchestrator.run.rundir import RunDir, RunInfo, RunState, resolve, runs_in
from orchestrator.run.stats import Sampler
from orchestrator.run.supervisor import first_failure

ACTIVE = (Status.RUNNING, Status.PENDING, Status.PAUSED)
STOP_WAIT = 120.0  # seconds `down` waits for a run's supervisor to finish it, before it removes what is left itself


def _backend(backend: Optional[Backend], engine: Any, run: Optional[RunDir] = None) -> Backend:
    """The injected backend, else the one the run was applied with, on its engine (as its plan.json records); for no
    run, Compose on the default engine ($ORCH_ENGINE, else Docker)."""
    if backend is not None:
        return backend
    if run is not None:
        return backends.for_record(run.plan_record(), engine)
    return backends.get("compose", engine)


def _live_runs(backend: Backend) -> dict[str, list[ReplicaState]]:
    """Every orch replica on the engine, grouped by run."""
    live: dict[str, list[ReplicaState]] = {}
    for s in backend.states():
        live.setdefault(s.run, []).append(s)
    return live


def _live_state(states: list[ReplicaState]) -> RunState:
    if any(s.status in ACTIVE for s in states):
        return RunState.RUNNING
    return RunState.FAILED if first_failure(states) else RunState.SUCCEEDED


def _keys(info: Optional[RunInfo]) -> list[tuple[str, int]]:
    return info.spec.replica_keys() if info is not None and info.spec is not None else []


def _reporting(info: Optional[RunInfo]) -> list[tuple[str, int]]:
    return info.spec.reporting_keys() if info is not None and info.spec is not None else []


def _copy_reports(backend: Backend, run: RunDir, info: Optional[RunInfo],
                  states: Optional[list[ReplicaState]] = None) -> None:
    """Bring a detached run's records into its folder, where its replicas report on stdout (Swarm, Kubernetes):
    no orch copies them while it runs, and once its replicas are removed their output is gone."""
    if not backend.reports_on_stdout or info is None or info.spec is None or holder(run.path) is not None:
        return
    from orchestrator.run.copier import ReportCopier

    ReportCopier(backend, run, info.spec.replica_keys()).rebuild(
        backend.states(run.run_id) if states is None else states)


def ps(run_ids: Optional[list[str]] = None, engine: Any = None, paths: Optional[Paths] = None,
       backend: Optional[Backend] = None, say: Optional[Callable[[str], None]] = None) -> list[RunInfo]:
    """Runs with their state, oldest first, from their folders; live replicas decide the state of a run still up.
    A run under way whose supervisor is gone is adopted by a new one on the spot (``supervised`` says which runs have
    one). An engine that does not answer costs one line (``say``): each run is then as its record left it, and one
    recorded as under way with no supervisor is of unknown state."""
    given, backend = backend, _backend(backend, engine)
    paths = paths or default_paths()
    note = ""
    try:
        live: Optional[dict[str, list[ReplicaState]]] = _live_runs(backend)
    except EngineUnreachable as exc:
        live, note = None, f"showing the runs as their records left them; no live state: {exc.message}"
    runs: dict[str, RunInfo] = {}
    for run in runs_in(paths):
        info = run.record()
        if info is not None:
            if not info.state.is_terminal:
                info.supervised = holder(run.path) is not None
                if not info.supervised and live is not None and given is None and engine is None:
                    info = _adopted(run, info, say)
                if not info.supervised and not info.state.is_terminal:
                    if live is None:
                        info.state = RunState.UNKNOWN  # its replicas may still run: only the engine could say
                    elif info.run_id not in live:
                        info.state = _unseen_state(run, _backend(given, engine, run), backend)
            runs[info.run_id] = info
    live = live or {}
    for run_id, states in live.items():
        info = runs.setdefault(run_id, RunInfo(run_id=run_id, state=RunState.UNKNOWN, spec=None))
        info.state = _live_state(states)
        if info.run_dir and info.spec is not None:
            run = RunDir.of(paths, run_id)
            _copy_reports(_backend(given, engine, run), run, info)
            info.workers = run.results(_reporting(info))
    if run_ids:
        missing = [r for r in run_ids if r not in runs]
        if missing:
            raise RunNotFound(f"no run {missing[0]!r}; `orch ps` lists the runs")
    if note and say is not None:  # said once the runs are found: an error is the one line a failed ps says
        say(note)
    if run_ids:
        return [runs[r] for r in run_ids]
    return sorted(runs.values(), key=lambda r: (r.started or 0, r.run_id))


def _unseen_state(run: RunDir, own: Backend, asked: Backend) -> RunState:
    """A run recorded as under way, with no supervisor and no replica on the engine ``ps`` asked: lost, unless it was
    applied elsewhere (another backend, or Podman against Docker) and its own backend still has replicas of it."""
    if own is asked or own.place == asked.place:
        return RunState.LOST  # recorded as under way, yet no replica and no orch is left
    try:
        states = own.states(run.run_id)
    except OrchError:
        return RunState.UNKNOWN  # its own engine does not answer: only it could say
    return _live_state(states) if states else RunState.LOST


def _adopted(run: RunDir, info: RunInfo, say: Optional[Callable[[str], None]]) -> RunInfo:
    """A run recorded as under way whose supervisor is gone, adopted by a new one (start.adopt); if none can plan
    it, as it is. What happened is said in one line."""
    from orchestrator.run.start import adopt

    try:
        pid = adopt(run)
    except OrchError as exc:
        if say is not None:
            say(f"run {run.run_id} has no supervisor and none could adopt it: {exc.message}")
        return info
    if say is not None:
        say(f"run {run.run_id} had lost its supervisor; adopted by a new one (pid {pid})")
    adopted = run.record() or info
    adopted.supervised = True
    return adopted


def _stop_supervised(run: RunDir) -> None:
    """Ask the run's supervisor, if it has one, to stop it (SIGTERM) and wait for the finish it then makes: its logs
    and results saved, its replicas removed, its record ``stopped``."""
    pid = holder(run.path)
    if not pid:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_WAIT
    while holder(run.path) is not None and time.monotonic() < deadline:
        time.sleep(0.1)


def down(run_ids: Optional[list[str]] = None, all_runs: bool = False, engine: Any = None,
         paths: Optional[Paths] = None, backend: Optional[Backend] = None) -> list[str]:
    """Remove the replicas and networks of runs (their results stay); return the runs taken down."""
    if not run_ids and not all_runs:
        raise InvalidSpec("name a run (`orch ps` lists them) or pass --all")
    if run_ids and all_runs:
        raise InvalidSpec("--all takes down every run; leave out the run names, or --all")
    paths = paths or default_paths()
    # Only --all asks the default engine for every run; a named run is asked of the backend it was applied with
    # (a Kubernetes run needs no Docker engine, a Swarm run's replicas may all be on other nodes).
    live = _live_runs(_backend(backend, engine)) if all_runs else {}
    targets = sorted(live) if all_runs else list(run_ids or [])
    done = []
    for run_id in targets:
        run = RunDir.of(paths, run_id)
        if run.path.is_dir():
            _stop_supervised(run)
        run_backend = _backend(backend, engine, run if run.exists() else None)
        if run_id not in live:
            live[run_id] = run_backend.states(run_id)
            if not live[run_id]:
                del live[run_id]
                if not run.exists():
                    raise RunNotFound(f"no run {run_id!r}; `orch ps` lists the runs")
        final_state = RunState.STOPPED
        if run_id in live:
            if _live_state(live[run_id]) != RunState.RUNNING:
                final_state = _live_state(live[run_id])
            if run.path.is_dir():
                _copy_reports(run_backend, run, run.record(), live[run_id])
                logs.save(run_backend, run, live[run_id])
            run_backend.cancel(run_id, run.artifact(), grace=5)
        info = run.record()
        if info is not None and info.spec is not None:  # a file system no supervisor released (volume.py)
            volume.release(run, volume.folders(info.spec))
        if info is not None and not info.state.is_terminal:
            info.state = final_state
            info.workers = run.results(_reporting(info))
            run.write_record(info)
        done.append(run_id)
    return done


def read_logs(run_id: Optional[str] = None, selection: logs.LogFilter = logs.LogFilter(),
              tail: Optional[int] = None, follow: bool = False, engine: Any = None,
              paths: Optional[Paths] = None, backend: Optional[Backend] = None
              ) -> tuple[str, Iterator[logs.LogRecord]]:
    """The run's id and its log records: merged in time order, then (with ``follow``) new ones as they come.

    A run with replicas is read from the engine; one whose replicas are gone, from the logs saved in
    its run directory.
    """
    run = resolve(paths or default_paths(), run_id)
    backend = _backend(backend, engine, run)

    def records() -> Iterator[logs.LogRecord]:
        replicas = backend.states(run.run_id)
        if not replicas:
            yield from logs.select(logs.saved_records(run, _keys(run.record())), selection, tail)
            return
        backlog = sorted((r for s in replicas for r in logs.replica_records(backend, s)), key=lambda r: r.time)
        yield from logs.select(backlog, selection, tail)
        running = [s for s in replicas if s.status in ACTIVE]
        if follow and running:
            since = max((r.time for r in backlog), default=0.0)
            for record in logs.follow(backend, running, since):
                if record.time > since and selection.keep(record):
                    yield record

    return run.run_id, records()


def stats_snapshots(run_id: Optional[str] = None, interval: float = 1.0, engine: Any = None,
                    paths: Optional[Paths] = None, backend: Optional[Backend] = None
                    ) -> tuple[str, Generator[dict[tuple[str, int], Any], None, None]]:
    """The run's id and, every ``interval`` seconds while it runs, the latest sample of each replica."""
    run = resolve(paths or default_paths(), run_id)
    backend = _backend(backend, engine, run)
    run_id = run.run_id
    elsewhere = backend.stats_elsewhere(run_id)
    if elsewhere is not None:
        raise OrchError(f"run {run_id} runs on {backend.name}: {elsewhere}")
    running = [s for s in backend.states(run_id) if s.status == Status.RUNNING]
    if not running:
        raise OrchError(f"run {run_id} has no running containers; `orch collect {run_id}` shows what it recorded")

    def snapshots() -> Generator[dict[tuple[str, int], Any], None, None]:
        sampler = Sampler(backend, None, interval).start(running)
        try:
            waited = 0
            while any(s.status == Status.RUNNING for s in backend.states(run_id)):
                time.sleep(interval)
                waited += 1
                snapshot = sampler.snapshot()
                # A stream's first record has no CPU delta yet: wait (a little) for every replica.
                if len(snapshot) == len(running) or waited > 3:
                    yield snapshot
        finally:
            sampler.stop()

    return run_id, snapshots()
