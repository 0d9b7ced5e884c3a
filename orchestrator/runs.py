"""Apply a plan: launch a run with Compose, watch it, collect what it wrote, and clean up."""
from __future__ import annotations

import errno
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from . import contract, logs
from . import data as datasets
from .engine import ContainerState, Engine
from .errors import DiskFull, InvalidSpec, JobTimedOut, OrchError, RunNotFound, WorkerFailed
from .paths import Paths, default_paths
from .plan import Plan, plan
from .spec import JobSpec, make_spec
from .stats import Sampler, parse_stats

RUN_FILE = "run.json"
CONTAINER_UID = 1000  # workers never run as root; a root host hands them their folders
FINISH_GRACE = 2.0  # seconds a worker may take to exit after the last result is written

Say = Callable[[str], None]
OnEvent = Callable[[dict], None]


@dataclass
class RunInfo:
    """A run as `orch ps` and `up` report it."""

    run_id: str
    state: str  # starting, running, succeeded, failed, timed-out, interrupted, stopped
    spec: dict[str, Any]
    started: Optional[float] = None
    wall_seconds: Optional[float] = None
    error: Optional[str] = None
    workers: list[dict[str, Any]] = field(default_factory=list)
    run_dir: Optional[str] = None
    restarts: list[dict[str, Any]] = field(default_factory=list)

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
            "state": self.state,
            "spec": self.spec,
            "started": self.started,
            "wall_seconds": self.wall_seconds,
            "train_seconds": self.train_seconds,
            "test_accuracy": self.test_accuracy,
            "error": self.error,
            "workers": self.workers,
            "run_dir": self.run_dir,
            "restarts": self.restarts,
        }


def container_user() -> str:
    """The uid:gid workers run as: the invoking user, or an unprivileged one when that is root."""
    uid, gid = os.getuid(), os.getgid()
    return f"{CONTAINER_UID}:{CONTAINER_UID}" if uid == 0 else f"{uid}:{gid}"


def _write_json(path: Path, payload: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> Optional[Any]:
    """The JSON in ``path``, or None if it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class EventTailer:
    """Reads the workers' event files incrementally."""

    def __init__(self, run_dir: Path, workers: int) -> None:
        self.files = [run_dir / contract.worker_dir(i) / contract.EVENTS_FILE for i in range(workers)]
        self.offsets = [0] * workers

    def read(self) -> list[dict]:
        out = []
        for i, path in enumerate(self.files):
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets[i])
                    chunk = f.read()
            except FileNotFoundError:
                continue
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for the next read
            self.offsets[i] += len(complete)
            for line in complete.splitlines():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return sorted(out, key=lambda e: e.get("time", 0))


def worker_results(run_dir: Path, workers: int) -> list[dict[str, Any]]:
    """Per-worker result records (``{"worker": i}`` alone where a worker wrote none)."""
    out = []
    for i in range(workers):
        result = read_json(run_dir / contract.worker_dir(i) / contract.RESULT_FILE) or {}
        out.append({
            "worker": i,
            "train_seconds": result.get("train_seconds"),
            "test_accuracy": result.get("test_accuracy"),
            "samples_per_epoch": result.get("samples_per_epoch"),
            "steps_per_epoch": result.get("steps_per_epoch"),
            "replicas": result.get("replicas"),
            "global_batch": result.get("global_batch"),
            "exit_code": None,
        })
    return out


def meaningful_lines(text: str, count: int) -> list[str]:
    """The last ``count`` lines of a log, without TensorFlow's start-up noise."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not logs.is_noise(ln)]
    return lines[-count:]


def prepare_run_dir(p: Plan) -> None:
    """Create the run directory with its compose file and the folders the workers write."""
    if p.run_dir.exists():
        raise InvalidSpec(f"run_id: {p.spec.run_id} is already used ({p.run_dir}); pick another or omit --run-id")
    try:
        _make_run_dir(p)
    except OSError as exc:
        shutil.rmtree(p.run_dir, ignore_errors=True)  # nothing half-made is left behind
        if exc.errno == errno.ENOSPC:
            raise DiskFull(f"no space left in {p.run_dir.parent}; free some, or point ORCH_RUNS_DIR elsewhere") from None
        raise OrchError(f"cannot create the run directory {p.run_dir}: {exc.strerror or exc}") from None


def _make_run_dir(p: Plan) -> None:
    p.run_dir.mkdir(parents=True)
    for name in [contract.CHECKPOINT_DIR, *(contract.worker_dir(w.index) for w in p.workers)]:
        (p.run_dir / name).mkdir()
        if os.getuid() == 0:
            os.chown(p.run_dir / name, CONTAINER_UID, CONTAINER_UID)
    p.compose_file.write_text(p.compose_text)
    _write_json(p.run_dir / "plan.json", {k: v for k, v in p.to_dict().items() if k != "compose"})


def _memory_starved(engine: Engine, states: list[ContainerState]) -> Optional[tuple[int, str]]:
    """A worker at its memory limit, and a sentence saying so; None if none is.

    Near the limit the kernel evicts the pages of TensorFlow's mapped libraries as fast as the worker
    reads them back: it crawls rather than being OOM-killed, and from outside that looks like a stall.
    """
    for c in states:
        raw = engine.stats_once(c.id) if c.status == "running" else None
        sample = parse_stats(raw, c.index, c.name, time.time()) if raw else None
        if sample and sample.mem_limit_bytes and sample.mem_used_bytes >= 0.9 * sample.mem_limit_bytes:
            return c.index, (f"worker-{c.index} is using {sample.mem_used_bytes / 2**20:.0f} MiB of its "
                             f"{sample.mem_limit_bytes / 2**20:.0f} MiB memory limit; raise --memory")
    return None


def _first_failure(states: list[ContainerState]) -> Optional[ContainerState]:
    failed = [c for c in states if c.status in ("exited", "dead") and c.exit_code != 0]
    # The worker that died first is the cause; the others usually fail because it went away.
    return min(failed, key=lambda c: (c.finished_at or "~", c.index)) if failed else None


def _describe_exit(c: ContainerState) -> str:
    code = c.exit_code
    if c.oom_killed:
        return f"was killed for exceeding its memory limit (exit {code}); raise --memory"
    if code is not None and code > 128:
        return f"was killed by signal {code - 128} (exit {code})"
    return f"exited with code {code}"


def _heartbeat(run_dir: Path, worker: int) -> float:
    """When ``worker`` last reported training progress (0 if it has not yet)."""
    try:
        return (run_dir / contract.worker_dir(worker) / contract.HEARTBEAT_FILE).stat().st_mtime
    except OSError:
        return 0.0


def _retryable(c: Optional[ContainerState]) -> bool:
    """Kubeflow's ExitCode policy: a signal (exit > 128) or a vanished container may be retried; exit
    codes 1-127 are the program's own verdict, and an out-of-memory kill would only happen again."""
    return c is None or (c.exit_code is not None and c.exit_code > 128 and not c.oom_killed)


def _watch(engine: Engine, p: Plan, on_event: OnEvent, poll: float, tailer: EventTailer) -> None:
    """Wait until every worker succeeded; raise WorkerFailed or JobTimedOut as soon as one cannot."""
    expected = set(range(p.spec.workers))
    launched = time.monotonic()
    stages: dict[int, str] = {}
    joined_at: Optional[float] = None
    done: set[int] = set()
    done_at: Optional[float] = None
    while True:
        for event in tailer.read():
            if event.get("event") == contract.EVENT_START:
                stages[event.get("worker", -1)] = event.get("stage", "")
            elif event.get("event") == contract.EVENT_DONE:
                done.add(event.get("worker", -1))
            on_event(event)
        states = engine.containers(p.spec.run_id)
        present = {c.index for c in states}
        failed = _first_failure(states)
        paused = [c.index for c in states if c.status == "paused"]
        others = "; the other workers were stopped" if p.spec.workers > 1 else ""
        if failed is not None:
            lines = meaningful_lines(engine.logs(failed.id, tail=200), 15)
            message = f"worker-{failed.index} {_describe_exit(failed)}{others}"
            if paused:
                message = (f"worker-{paused[0]} stalled (its container is paused) and worker-{failed.index} "
                           f"{_describe_exit(failed)} when the all-reduce timed out{others}")
            raise WorkerFailed(failed.index, failed.exit_code, message, details="\n".join(lines),
                               retryable=_retryable(failed))
        if present != expected:
            gone = sorted(expected - present)
            raise WorkerFailed(gone[0], None, f"worker-{gone[0]} vanished (its container was removed from outside "
                                              f"orch){others}", retryable=True)
        if all(c.status == "exited" and c.exit_code == 0 for c in states):
            for event in tailer.read():
                on_event(event)
            return
        if done == expected:
            # Every worker wrote its result, and each leaves by itself once all have. One that has not
            # after a moment is stuck in TensorFlow's teardown, which at times idles for half a minute.
            done_at = done_at or time.monotonic()
            if time.monotonic() - done_at > FINISH_GRACE:
                return
        joined = {i for i, stage in stages.items() if stage == "training"}
        if joined == expected:
            joined_at = joined_at or time.time()
            last = max([_heartbeat(p.run_dir, i) for i in expected] + [joined_at])
            if time.time() - last > p.spec.stall_timeout:
                starved = None if paused else _memory_starved(engine, states)
                culprit = (f"worker-{paused[0]}'s container is paused" if paused else starved[1] if starved else
                           "a worker is stuck (see `orch logs`)")
                raise WorkerFailed(paused[0] if paused else starved[0] if starved else -1, None,
                                   f"training stalled: no worker made progress for {p.spec.stall_timeout:g} s; "
                                   f"{culprit}{others}", retryable=True)
        if joined != expected and time.monotonic() - launched > p.spec.startup_timeout:
            missing = sorted(expected - joined)
            never = [i for i in missing if i not in stages or i in paused]
            culprit = never or missing
            names = ", ".join(f"worker-{i}" for i in culprit)
            raise JobTimedOut(f"{names} did not join the cluster within the startup timeout of "
                              f"{p.spec.startup_timeout:g} s{others}; raise --startup-timeout if start-up is "
                              "just slow here")
        time.sleep(poll)


def up(
    spec: JobSpec,
    detach: bool = False,
    engine: Optional[Engine] = None,
    paths: Optional[Paths] = None,
    say: Optional[Say] = None,
    on_event: Optional[OnEvent] = None,
    poll: float = 0.25,
    stats_interval: Optional[float] = 1.0,
) -> RunInfo:
    """Launch ``spec``; unless ``detach``, wait for it, clean up, and return how it went.

    Raises WorkerFailed if a worker fails (the others are stopped and every container removed) and
    re-raises KeyboardInterrupt after the same clean-up. While it waits, every container's resource
    use is sampled every ``stats_interval`` seconds into the run's stats.csv (None: no sampling).
    """
    engine = engine or Engine()
    paths = paths or default_paths()
    say = say or (lambda _msg: None)
    on_event = on_event or (lambda _event: None)
    p = plan(spec, paths, user=container_user(), host_cpus=os.cpu_count() or 1)
    engine.ping()
    engine.compose_version()
    engine.require_image(p.image, "run `orch build` first" if spec.image is None else "pull or build it first")
    datasets.prepare(paths.data, spec.dataset, say)
    prepare_run_dir(p)
    info = RunInfo(run_id=spec.run_id, state="starting", spec=spec.model_dump(), started=time.time(),
                   run_dir=str(p.run_dir))
    _write_json(p.run_dir / RUN_FILE, info.to_dict())
    started = time.monotonic()
    say(f"starting run {spec.run_id}: {spec.workers} worker(s), image {p.image}")
    launched = False
    sampler: Optional[Sampler] = None
    tailer = EventTailer(p.run_dir, spec.workers)
    try:
        engine.compose_up(p.compose_file, p.project)
        launched = True
        info.state = "running"
        _write_json(p.run_dir / RUN_FILE, info.to_dict())
        if detach:
            return info
        while True:
            if stats_interval:
                sampler = Sampler(engine, p.run_dir, stats_interval).start(engine.containers(spec.run_id))
            try:
                _watch(engine, p, on_event, poll, tailer)
                break
            except WorkerFailed as exc:
                if not exc.retryable or len(info.restarts) >= spec.max_restarts:
                    raise
                # MultiWorkerMirroredStrategy cannot replace one worker: the whole group restarts,
                # and BackupAndRestore resumes it from the last checkpoint in the run directory.
                info.restarts.append({"attempt": len(info.restarts) + 2, "time": time.time(), "worker": exc.worker,
                                      "exit_code": exc.worker_exit_code, "cause": exc.message})
                say(f"{exc.message}; restarting the whole group from its last checkpoint "
                    f"(restart {len(info.restarts)} of {spec.max_restarts})")
                if sampler is not None:
                    sampler.stop()
                logs.save(engine, p.run_dir, engine.containers(spec.run_id), append=True)
                engine.compose_down(p.compose_file, p.project, timeout=5)
                _write_json(p.run_dir / RUN_FILE, info.to_dict())
                engine.compose_up(p.compose_file, p.project)
        info.state = "succeeded"
    except JobTimedOut as exc:
        info.state, info.error = "timed-out", exc.message
        raise
    except WorkerFailed as exc:
        info.state = "failed"
        info.error = exc.message + (f" (after {len(info.restarts)} restarts)" if info.restarts else "")
        raise
    except KeyboardInterrupt:
        info.state, info.error = "interrupted", "interrupted by the user"
        raise
    except OrchError as exc:
        info.state, info.error = "failed", exc.message
        raise
    finally:
        try:
            if sampler is not None:
                sampler.stop()
            if not (detach and launched):
                _finish(engine, p, info, started)
                if info.state == "interrupted":
                    say(f"interrupted: containers removed; what was written is in {p.run_dir}")
        except KeyboardInterrupt:
            _force_remove(engine, p, info)
            raise
    return info


def _force_remove(engine: Engine, p: Plan, info: RunInfo) -> None:
    """A second interrupt during the clean-up: remove the containers at once, deaf to a third."""
    import signal

    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals are not ours to change
        previous = None
    try:
        for leftover in engine.containers(p.spec.run_id):
            engine.remove_container(leftover.id)
        engine.compose_down(p.compose_file, p.project, timeout=0)  # the network
        info.state = "interrupted"
        info.error = "interrupted; clean-up forced by a second interrupt"
        _write_json(p.run_dir / RUN_FILE, info.to_dict())
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _finish(engine: Engine, p: Plan, info: RunInfo, started: float) -> None:
    """Save logs and results, then remove the run's containers and network, whatever happened."""
    try:
        states = engine.containers(p.spec.run_id)
        logs.save(engine, p.run_dir, states, append=bool(info.restarts))
        exit_codes = {c.index: c.exit_code for c in states}
    finally:
        # Once every result is written nothing is left to lose: no grace period for the teardown.
        engine.compose_down(p.compose_file, p.project, timeout=0 if info.state == "succeeded" else 5)
        for leftover in engine.containers(p.spec.run_id):
            engine.remove_container(leftover.id)
    if info.state == "succeeded":
        # The checkpoints exist to resume a failed group; a finished run has nothing to resume.
        shutil.rmtree(p.run_dir / contract.CHECKPOINT_DIR, ignore_errors=True)
    info.wall_seconds = time.monotonic() - started
    info.workers = worker_results(p.run_dir, p.spec.workers)
    for w in info.workers:
        w["exit_code"] = exit_codes.get(w["worker"])
        # None: still running when orch stopped it, after it had written its result
        w["stopped_after_result"] = w["exit_code"] is None and w["test_accuracy"] is not None
    _write_json(p.run_dir / RUN_FILE, info.to_dict())


def _load_run(run_dir: Path) -> Optional[RunInfo]:
    record = read_json(run_dir / RUN_FILE)
    if not isinstance(record, dict) or "run_id" not in record:
        return None
    info = RunInfo(run_id=record["run_id"], state=record.get("state", "unknown"), spec=record.get("spec") or {},
                   started=record.get("started"), wall_seconds=record.get("wall_seconds"),
                   error=record.get("error"), workers=record.get("workers") or [], run_dir=str(run_dir),
                   restarts=record.get("restarts") or [])
    return info


def _live_runs(engine: Engine) -> dict[str, list[ContainerState]]:
    """Every orch container on the engine, grouped by run."""
    live: dict[str, list[ContainerState]] = {}
    for c in engine.containers():
        live.setdefault(c.run, []).append(c)
    return live


def _live_state(states: list[ContainerState]) -> str:
    if any(c.status in ("running", "created", "restarting", "paused") for c in states):
        return "running"
    return "failed" if _first_failure(states) else "succeeded"


def ps(run_ids: Optional[list[str]] = None, engine: Optional[Engine] = None,
       paths: Optional[Paths] = None) -> list[RunInfo]:
    """Runs with their state, newest last; live containers decide the state of a run still up."""
    engine = engine or Engine()
    paths = paths or default_paths()
    live = _live_runs(engine)
    runs: dict[str, RunInfo] = {}
    if paths.runs.is_dir():
        for run_dir in sorted(paths.runs.iterdir()):
            info = _load_run(run_dir)
            if info is not None:
                runs[info.run_id] = info
    for run_id, states in live.items():
        info = runs.setdefault(run_id, RunInfo(run_id=run_id, state="unknown", spec={}))
        info.state = _live_state(states)
        if info.run_dir and info.spec.get("workers"):
            info.workers = worker_results(Path(info.run_dir), int(info.spec["workers"]))
    if run_ids:
        missing = [r for r in run_ids if r not in runs]
        if missing:
            raise RunNotFound(f"no run {missing[0]!r}; `orch ps` lists the runs")
        return [runs[r] for r in run_ids]
    return sorted(runs.values(), key=lambda r: (r.started or 0, r.run_id))


def down(run_ids: Optional[list[str]] = None, all_runs: bool = False, engine: Optional[Engine] = None,
         paths: Optional[Paths] = None) -> list[str]:
    """Remove the containers and networks of runs (their results stay); return the runs taken down."""
    engine = engine or Engine()
    paths = paths or default_paths()
    live = _live_runs(engine)
    targets = sorted(live) if all_runs else list(run_ids or [])
    if not targets and not all_runs:
        raise InvalidSpec("name a run (`orch ps` lists them) or pass --all")
    done = []
    for run_id in targets:
        run_dir = paths.runs / run_id
        if run_id not in live and not (run_dir / RUN_FILE).is_file():
            raise RunNotFound(f"no run {run_id!r}; `orch ps` lists the runs")
        final_state = "stopped"
        if run_id in live:
            if _live_state(live[run_id]) != "running":
                final_state = _live_state(live[run_id])
            if run_dir.is_dir():
                logs.save(engine, run_dir, live[run_id])
            compose_file = run_dir / "compose.yml"
            if compose_file.is_file():
                engine.compose_down(compose_file, f"orch-{run_id}", timeout=5)
            for leftover in engine.containers(run_id):
                engine.remove_container(leftover.id)
        info = _load_run(run_dir)
        if info is not None and info.state in ("starting", "running"):
            info.state = final_state
            info.workers = worker_results(run_dir, int(info.spec.get("workers", 0)))
            _write_json(run_dir / RUN_FILE, info.to_dict())
        done.append(run_id)
    return done


__all__ = ["RunInfo", "up", "down", "ps", "make_spec", "EventTailer", "worker_results"]


def resolve_run(run_id: Optional[str], paths: Paths) -> str:
    """``run_id``, or the newest run in the runs folder when it is None."""
    if run_id is not None:
        if not (paths.runs / run_id / RUN_FILE).is_file():
            raise RunNotFound(f"no run {run_id!r} in {paths.runs}; `orch ps` lists the runs")
        return run_id
    runs = [info for d in (sorted(paths.runs.iterdir()) if paths.runs.is_dir() else [])
            if (info := _load_run(d)) is not None]
    if not runs:
        raise RunNotFound(f"no runs in {paths.runs} yet; start one with `orch up`")
    return max(runs, key=lambda r: (r.started or 0, r.run_id)).run_id


def read_logs(run_id: Optional[str] = None, selection: logs.LogFilter = logs.LogFilter(),
              tail: Optional[int] = None, follow: bool = False, engine: Optional[Engine] = None,
              paths: Optional[Paths] = None) -> tuple[str, Iterator[logs.LogRecord]]:
    """The run's id and its log records: merged in time order, then (with ``follow``) new ones as they come.

    A run with containers is read from the engine; one whose containers are gone, from the logs
    saved in its run directory.
    """
    engine = engine or Engine()
    paths = paths or default_paths()
    run_id = resolve_run(run_id, paths)
    run_dir = paths.runs / run_id
    workers = int((_load_run(run_dir).spec or {}).get("workers", 0))

    def records() -> Iterator[logs.LogRecord]:
        containers = engine.containers(run_id)
        if not containers:
            yield from logs.select(logs.saved_records(run_dir, workers), selection, tail)
            return
        backlog = sorted((r for c in containers for r in logs.container_records(engine, c)), key=lambda r: r.time)
        yield from logs.select(backlog, selection, tail)
        running = [c for c in containers if c.status in ("running", "created", "restarting", "paused")]
        if follow and running:
            since = max((r.time for r in backlog), default=0.0)
            for record in logs.follow(engine, running, since):
                if record.time > since and selection.keep(record):
                    yield record

    return run_id, records()


def stats_snapshots(run_id: Optional[str] = None, interval: float = 1.0, engine: Optional[Engine] = None,
                    paths: Optional[Paths] = None) -> tuple[str, Iterator[dict[int, Any]]]:
    """The run's id and, every ``interval`` seconds while it runs, the latest sample of each container."""
    engine = engine or Engine()
    paths = paths or default_paths()
    run_id = resolve_run(run_id, paths)
    running = [c for c in engine.containers(run_id) if c.status == "running"]
    if not running:
        raise OrchError(f"run {run_id} has no running containers; `orch collect {run_id}` shows what it recorded")

    def snapshots() -> Iterator[dict[int, Any]]:
        sampler = Sampler(engine, None, interval).start(running)
        try:
            waited = 0
            while any(c.status == "running" for c in engine.containers(run_id)):
                time.sleep(interval)
                waited += 1
                snapshot = sampler.snapshot()
                # A stream's first record has no CPU delta yet: wait (a little) for every container.
                if len(snapshot) == len(running) or waited > 3:
                    yield snapshot
        finally:
            sampler.stop()

    return run_id, snapshots()
