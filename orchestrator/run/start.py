"""Start a run under a supervisor of its own and attach to it (``up``), attach to a run later (``attach``), and adopt
a run whose supervisor died (``adopt``).

``up`` plans the run and prepares it here, where a bad input is one error and nothing runs yet; then it starts the
run's supervisor process (supervise.py) and either follows the run to its end (attach.py) or, detached, returns once
its replicas are launched. Either way the run keeps every guarantee when this process dies: they are the
supervisor's.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Optional

from orchestrator import backends, frameworks
from orchestrator.backends import Backend
from orchestrator.errors import OrchError, from_record
from orchestrator.jobspec import JobSpec
from orchestrator.paths import Paths, default_paths
from orchestrator.plan import plan
from orchestrator.run import logs, preflight, runner
from orchestrator.run.attach import POLL, Follower, OnEvent, OnState, follow
from orchestrator.run.lease import holder
from orchestrator.run.rundir import RunDir, RunInfo, RunState, resolve
from orchestrator.run.supervise import Settings, spawn

Say = Callable[[str], None]


def _quiet(*_args: Any) -> None:
    return None


def up(
    spec: JobSpec,
    detach: bool = False,
    engine: Any = None,
    paths: Optional[Paths] = None,
    say: Optional[Say] = None,
    on_event: Optional[OnEvent] = None,
    poll: float = POLL,
    stats_interval: Optional[float] = 1.0,
    backend: Optional[Backend] = None,
    host_cpus: Optional[int] = None,
    on_line: Optional[logs.OnLine] = None,
    on_state: Optional[OnState] = None,
) -> RunInfo:
    """Plan ``spec``, prepare it, start its supervisor, and follow it to its end: its record if it succeeded, else
    the error its supervisor met (WorkerFailed, JobTimedOut, ...; KeyboardInterrupt once an interrupt has finished
    it). With ``detach``, return its record once its replicas are launched. ``host_cpus``: the cores the replicas'
    pinning shares out (1: every replica on core 0); this machine's unless given. A ``backend`` or ``engine`` object
    given here cannot cross into another process: the run is then supervised in this one (``runner.apply``)."""
    paths = paths or default_paths()
    cpus = host_cpus or os.cpu_count() or 1
    p = plan(spec, paths, user=runner.container_user(), host_cpus=cpus)
    if backend is not None or engine is not None:
        return runner.apply(p, backend or backends.get(spec.backend, engine), paths, detach=detach, say=say,
                            on_event=on_event, poll=poll, stats_interval=stats_interval, on_line=on_line,
                            on_state=on_state)
    say = say or _quiet
    run_backend = backends.for_spec(spec)
    since = time.time()
    run, _info = preflight.prepare(p, run_backend, paths, say)
    spawn(run, Settings(paths, p.user, cpus, stats_interval, frameworks.origin(spec.framework.name)))
    if detach:
        return outcome(_launched(run, run_backend, say, poll))
    return outcome(follow(run, run_backend, say=say, on_event=on_event or _quiet, on_line=on_line, on_state=on_state,
                          adopt=lambda: adopt(run), since=since, poll=poll))


def _launched(run: RunDir, backend: Backend, say: Say, poll: float) -> RunInfo:
    """Wait until the run's replicas are launched, or it ended first, saying what its supervisor says meanwhile."""
    follower = Follower(run, backend, say, _quiet, None, None, time.time())
    while True:
        follower.step()
        pid, info = holder(run.path), run.record()
        if info is not None and (info.state != RunState.STARTING or (pid is None and info.state.is_terminal)):
            follower.step()
            return info
        if pid is None:
            adopt(run)
        time.sleep(poll)


def outcome(info: RunInfo) -> RunInfo:
    """``info`` if its run succeeded or still runs; else the error it ended with, raised."""
    if info.state in (RunState.SUCCEEDED, RunState.RUNNING, RunState.STARTING):
        return info
    raise from_record(info.failure, info.error or f"run {info.run_id} {info.state.value}")


def adopt(run: RunDir) -> int:
    """Start a supervisor for ``run``, whose own is gone; the PID of the one that holds it (another adopter may have
    been first). A run whose `orch up` ended before it started the first supervisor was never launched: it is
    recorded as failed, saying so, and OrchError raised."""
    if Settings.of(run) is None:
        info = run.record()
        if info is not None and not info.state.is_terminal:
            info.state = RunState.FAILED
            info.error = "the command that started it ended before the run's supervisor started; nothing was launched"
            run.write_record(info)
        raise OrchError(f"run {run.run_id} was never launched: the command that started it ended first")
    return spawn(run, adopt=True)


def attach(run_id: Optional[str] = None, paths: Optional[Paths] = None, say: Optional[Say] = None,
           on_event: Optional[OnEvent] = None, on_line: Optional[logs.OnLine] = None,
           on_state: Optional[OnState] = None, poll: float = POLL) -> RunInfo:
    """Follow a run (the latest, if ``run_id`` is None) from now to its end, adopting it if its supervisor is gone, and
    return or raise as ``up`` does. A run that has ended returns or raises at once."""
    run = resolve(paths or default_paths(), run_id)
    backend = backends.for_record(run.plan_record())
    return outcome(follow(run, backend, say=say or _quiet, on_event=on_event or _quiet, on_line=on_line,
                          on_state=on_state, adopt=lambda: adopt(run), poll=poll))
