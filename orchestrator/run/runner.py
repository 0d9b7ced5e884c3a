"""Supervise a run: launch it on its backend, let the supervisor's verdicts (supervisor.py) judge it, restart or stop
it, and finish and record it (``supervise``).

It runs in the run's supervisor process (supervise.py), apart from the command that started the run; ``apply`` runs
it in the calling process. Everything engine-specific is the backend's; every judgement is ``decide``'s; what the run
wrote is read through its ``RunDir``.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any, Optional

from orchestrator import backends, contract
from orchestrator.backends import Backend
from orchestrator.errors import JobTimedOut, OrchError, Stopped, WorkerFailed, to_record
from orchestrator.paths import Paths, default_paths
from orchestrator.plan import Plan
from orchestrator.run import disk, logs, preflight, volume
from orchestrator.run.attempt import Attempt, OnEvent, OnState, Say, raise_for
from orchestrator.run.rundir import CONTAINER_UID, RunDir, RunInfo, RunState
from orchestrator.run.stats import Sampler
from orchestrator.run.supervisor import Verdict
from orchestrator.safetext import one_line
from orchestrator.safetree import remove_tree


def container_user() -> str:
    """The uid:gid replicas run as: the invoking user, or an unprivileged one when that is root."""
    uid, gid = os.getuid(), os.getgid()
    return f"{CONTAINER_UID}:{CONTAINER_UID}" if uid == 0 else f"{uid}:{gid}"


def _ended(info: RunInfo, exc: BaseException) -> None:
    """Record in ``info`` how the run ended on ``exc``: its state, its one-line error, and the failure itself, which
    a client attached from another process raises again as it was (``errors.from_record``)."""
    after = f" (after {len(info.restarts)} restarts)" if info.restarts else ""
    if isinstance(exc, Stopped):
        info.state, info.error = RunState.STOPPED, "stopped by `orch down`"
    elif isinstance(exc, KeyboardInterrupt):
        info.state, info.error = RunState.INTERRUPTED, "interrupted by the user"
    elif isinstance(exc, JobTimedOut):
        info.state, info.error = RunState.TIMED_OUT, exc.message + after
    elif isinstance(exc, WorkerFailed):
        info.state, info.error = RunState.FAILED, exc.message + after
    elif isinstance(exc, OrchError):
        info.state, info.error = RunState.FAILED, exc.message
    else:
        info.state, info.error = RunState.FAILED, f"internal error: {type(exc).__name__}: {exc}"
    info.failure = to_record(exc, info.error)


def _bind_volume(p: Plan, backend: Backend, run: RunDir, info: RunInfo, say: Say) -> None:
    """The replicas' folders on a file system of --disk-limit's size, where they share the run directory with orch and
    the kernel can hold it (volume.py); what holds the limit is recorded either way (``disk_bound``)."""
    if not backend.binds_run_dir or volume.is_bound(run):
        return
    reason = volume.bind(run, volume.folders(p.spec), p.spec.disk_limit_mb)
    info.disk_bound = "kernel" if reason is None else f"guard ({reason})"
    if reason is not None and p.spec.disk_limit_mb:
        say(f"--disk-limit is held by orch's disk guard alone: no file system of that size for the run, as {reason}")


ADOPT_WAIT = 10.0  # seconds an adopter waits for every replica to be listed (a Job's pods come a moment after it)


def _listed(backend: Backend, spec: Any, clock: Any, poll: float) -> None:
    """Wait, up to ADOPT_WAIT, until the engine lists every replica of an adopted run; those it still does not list
    are then judged by ``decide`` (they vanished)."""
    deadline = clock.monotonic() + ADOPT_WAIT
    wanted = set(spec.replica_keys())
    while not wanted <= {s.key for s in backend.states(spec.run_id)} and clock.monotonic() < deadline:
        clock.sleep(poll)


def supervise(
    p: Plan,
    backend: Backend,
    run: RunDir,
    info: RunInfo,
    say: Optional[Say] = None,
    on_event: Optional[OnEvent] = None,
    poll: float = 0.25,
    stats_interval: Optional[float] = 1.0,
    clock: Any = time,
    on_line: Optional[logs.OnLine] = None,
    on_state: Optional[OnState] = None,
    adopt: bool = False,
) -> RunInfo:
    """Launch the prepared run ``p`` (``preflight.prepare``), watch it to its end, restart or stop it, and finish it
    (logs and results saved, replicas removed, the record written last): everything that holds a run, in the process
    that calls it. With ``adopt``, take over a run whose supervisor died where it is: its replicas are watched as they
    are (launched first only if they never were), its restarts so far counted.

    Raises WorkerFailed if a replica fails, JobTimedOut on a timeout, and re-raises KeyboardInterrupt, each after the
    same finish. While it watches, every replica's resource use is sampled every ``stats_interval`` seconds into the
    run's stats.csv (None: no sampling); each line a replica writes goes to ``on_line`` as it is written, and each
    replica whose status changes to ``on_state`` (and into the run's replicas.json, for the clients that attach).
    ``clock`` (with time, monotonic and sleep) is the time module, or a fake that tests drive."""
    say = say or (lambda _msg: None)
    on_event = on_event or (lambda _key, _event: None)
    spec = p.spec
    begun = info.started or time.time()
    started = time.monotonic() - max(0.0, time.time() - begun)  # the run's wall time counts from its making
    info.supervisor_pid = os.getpid()
    run.write_record(info)
    sampler: Optional[Sampler] = None
    attempt = Attempt(p, backend, run, on_event, poll, clock, on_state, say)
    streamer: Optional[logs.Streamer] = None
    guard: Optional[disk.Guard] = None
    try:
        # The disk guard measures from before the replicas start: a writer at full speed passes a limit of
        # hundreds of MiB in the second Compose takes to start the rest.
        guard = attempt.guard()
        applied = begun if adopt else time.time()
        if adopt:
            launched = info.state == RunState.RUNNING or bool(backend.states(spec.run_id))
            if launched:
                _listed(backend, spec, clock, poll)
            say(f"adopted run {spec.run_id}: its supervisor was gone; "
                f"{'watching its replicas' if launched else 'starting its replicas'} from here")
        else:
            launched = False
            roles = ", ".join(f"{r.replicas} {r.name}" for r in spec.roles)
            say(f"starting run {spec.run_id}: {roles if len(spec.roles) > 1 else f'{spec.workers} worker(s)'}, "
                f"image {p.image}")
        if not launched:
            _bind_volume(p, backend, run, info, say)
            backend.apply(p, p.artifact_file)
        info.state = RunState.RUNNING
        run.write_record(info)
        while True:
            if stats_interval or on_line:
                states = backend.states(spec.run_id)
                if stats_interval:
                    sampler = Sampler(backend, run.path, stats_interval).start(states)
                if on_line:
                    streamer = logs.Streamer(backend, states, on_line, since=applied).start()
            decision = attempt.watch(len(info.restarts), guard)
            guard.stop()
            if streamer is not None:
                streamer.stop()  # the lines the replicas wrote last, before the verdict is told
            if decision.verdict == Verdict.SUCCEEDED:
                break
            if decision.verdict != Verdict.RESTART:
                raise_for(decision, backend)
            # The strategy cannot replace one replica: the whole group restarts, and resumes from the
            # last checkpoint in the run directory.
            info.restarts.append({"attempt": len(info.restarts) + 2, "time": time.time(),
                                  "role": decision.replica[0] if decision.replica else None,
                                  "worker": decision.replica[1] if decision.replica else -1,
                                  "exit_code": decision.exit_code, "cause": decision.message})
            say(f"{decision.message}; restarting the whole group from its last checkpoint "
                f"(restart {len(info.restarts)} of {spec.max_restarts})")
            if sampler is not None:
                sampler.stop()
            logs.save(backend, run, backend.states(spec.run_id), append=True)
            backend.cancel(spec.run_id, p.artifact_file, grace=5)
            run.write_record(info)
            backend.stage(p, say)  # what the replicas need, as the images are now (a rebuild's environment copy)
            applied = time.time()
            guard = attempt.guard()
            backend.apply(p, p.artifact_file)
        info.state = RunState.SUCCEEDED
    except BaseException as exc:
        _ended(info, exc)
        raise
    finally:
        try:
            try:
                if guard is not None:
                    guard.stop()
                if sampler is not None:
                    sampler.stop()
            finally:  # the finish runs, and writes the record, whatever stopping the sampler met
                _finish(backend, p, run, info, started, attempt, say, adopted=adopt)
                if info.state in (RunState.INTERRUPTED, RunState.STOPPED):
                    say(f"{info.state.value}: containers removed; what was written is in {run.path}")
        except KeyboardInterrupt:
            _force_remove(backend, p, run, info)
            raise
    return info


def apply(
    p: Plan,
    backend: Optional[Backend] = None,
    paths: Optional[Paths] = None,
    detach: bool = False,
    say: Optional[Say] = None,
    on_event: Optional[OnEvent] = None,
    poll: float = 0.25,
    stats_interval: Optional[float] = 1.0,
    clock: Any = time,
    on_line: Optional[logs.OnLine] = None,
    on_state: Optional[OnState] = None,
) -> RunInfo:
    """Run plan ``p`` with its supervisor in this process: ``prepare`` it, then ``supervise`` it to its end.

    With ``detach``, launch it and return with no supervisor: the next orch command that finds it (a ``Run`` handle,
    `orch attach`, `orch ps`) adopts it. `orch up` and the API start a supervisor process instead (``up``); this is
    the in-process form, for a backend object that cannot cross into another process (a test's fake) and for the
    benchmarks that time the supervision itself."""
    backend = backend or backends.for_spec(p.spec)
    paths = paths or default_paths()
    say = say or (lambda _msg: None)
    run, info = preflight.prepare(p, backend, paths, say)
    if not detach:
        return supervise(p, backend, run, info, say, on_event, poll, stats_interval, clock, on_line, on_state)
    try:
        backend.apply(p, p.artifact_file)
    except BaseException as exc:
        _ended(info, exc)
        _finish(backend, p, run, info, time.monotonic(), None, say)
        raise
    info.state = RunState.RUNNING
    run.write_record(info)
    return info


def _force_remove(backend: Backend, p: Plan, run: RunDir, info: RunInfo) -> None:
    """A second interrupt during the clean-up: remove the replicas at once, deaf to a third."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals are not ours to change
        previous = None
    try:
        backend.cancel(p.spec.run_id, p.artifact_file, grace=0)
        info.state = RunState.INTERRUPTED
        info.error = "interrupted; clean-up forced by a second interrupt"
        run.write_record(info)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _finish(backend: Backend, p: Plan, run: RunDir, info: RunInfo, started: float,
            attempt: Optional[Attempt] = None, say: Say = lambda _msg: None, adopted: bool = False) -> None:
    """Save logs and results, remove the run's replicas and network, and write the record, whatever
    happened: each step runs even when an earlier one failed, and the record is written last of all. A replica
    whose record files passed orch's limits is marked in it (``records_capped``)."""
    exit_codes: dict[tuple[str, int], Optional[int]] = {}
    ends: list[float] = []
    keys = p.spec.reporting_keys()
    copier = attempt.copier if attempt is not None else None
    try:
        states = backend.states(p.spec.run_id)
        exit_codes = {s.key: s.exit_code for s in states}
        ends = [s.finished_at for s in states if s.finished_at is not None]
        try:
            if copier is not None:  # the last records on stdout, before the replicas and their output go
                copier.pull(states, force=True)
        finally:
            logs.save(backend, run, states, append=bool(info.restarts))
    finally:
        try:
            # Once every result is written nothing is left to lose: no grace period for the teardown.
            backend.cancel(p.spec.run_id, p.artifact_file, grace=0 if info.state == RunState.SUCCEEDED else 5)
        finally:
            # The checkpoints are dropped from a finished run below: not copied off its file system first.
            drop = (contract.SHARED_DIR,) if info.state == RunState.SUCCEEDED else ()
            for problem in volume.release(run, volume.folders(p.spec), drop=drop):
                say(f"the run's file system: {problem}")
            if info.state == RunState.SUCCEEDED:
                # The checkpoints exist to resume a failed group; a finished run has nothing to resume.
                _remove_shared(run, say)
            info.wall_seconds = time.monotonic() - started
            if adopted and ends and info.started:  # replicas that ended unwatched: the run's time is to their end
                info.wall_seconds = max(0.0, min(max(ends), time.time()) - info.started)
            try:
                info.supervisor_pid = None
                info.workers = run.results(keys)
            except OrchError as exc:  # e.g. a result of another contract version: the run has no result
                if not info.error:
                    info.state, info.error = RunState.FAILED, exc.message
                raise
            finally:
                capped = attempt.capped() if attempt is not None else {}
                for key, w in zip(keys, info.workers):
                    w["exit_code"] = exit_codes.get(key)
                    if key in capped:
                        w["records_capped"] = capped[key]
                    # None: still running when orch stopped it, after it had written its result
                    w["stopped_after_result"] = w["exit_code"] is None and w["test_accuracy"] is not None
                run.write_record(info)


def _remove_shared(run: RunDir, say: Say) -> None:
    """Remove the shared folder, whatever tree the replicas left in it (``remove_tree``: any depth, count, names
    or permissions, never through a link); what stays, or an error, is said in one line and ends nothing."""
    try:
        left = remove_tree(run.shared)
    except Exception as exc:  # noqa: BLE001 - the run's record must still be written
        left = [f"{type(exc).__name__}: {exc}"]
    if left:
        say(one_line(f"could not remove all of {run.shared} ({'; '.join(left)}); the run's results are kept"))
