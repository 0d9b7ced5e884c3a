"""A run's supervisor process, one per run: ``python -m orchestrator.run.supervise RUN_DIR``.

`orch up` (attached or detached), the API and any orch command that adopts a run whose supervisor died start it
(``spawn``). It runs in a session of its own, with no terminal and no standard input, so that a closed terminal, a
dropped SSH session or the death of the command that started it does not reach it; it holds the run's lease for its
whole life (lease.py) and runs ``runner.supervise``: the stall and start-up timeouts, the restarts, the disk guard, the
stats sampler and the finish of the run. What it says goes into the run's supervisor.log, one JSON line each, for the
clients attached to it (attach.py); its own output, a traceback if it has one, into supervisor.err.

SIGINT interrupts the run (an attached client's Ctrl-C) and SIGTERM stops it (`orch down`, ``Run.cancel``): either
finishes it, its replicas stopped and removed and what they wrote kept; a second one removes them at once.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Optional

import orchestrator
from orchestrator.errors import OrchError, Stopped
from orchestrator.paths import Paths
from orchestrator.run.lease import acquire, holder
from orchestrator.run.rundir import SUPERVISOR_LOG, RunDir, RunState, read_json
from orchestrator.safeio import dumps, write_json

SETTINGS_FILE = "supervisor.json"  # how the first supervisor was started, so that an adopter plans the same run
ERR_FILE = "supervisor.err"
START_WAIT = 60.0  # seconds a new supervisor has to take its run's lease


@dataclass(frozen=True)
class Settings:
    """What a supervisor needs beyond the run's record to plan the run exactly as it was planned."""

    paths: Paths
    user: str
    host_cpus: int
    stats_interval: Optional[float]
    framework_from: Optional[str] = None  # a framework registered at run time: where it comes from (module:Class)

    def to_dict(self) -> dict[str, Any]:
        return {"runs": str(self.paths.runs), "cache": str(self.paths.cache), "results": str(self.paths.results),
                "user": self.user, "host_cpus": self.host_cpus, "stats_interval": self.stats_interval,
                "framework_from": self.framework_from}

    @classmethod
    def of(cls, run: RunDir) -> Optional["Settings"]:
        raw = read_json(run.path / SETTINGS_FILE)
        if not isinstance(raw, dict):
            return None
        try:
            interval = raw["stats_interval"]
            origin = raw.get("framework_from")
            return cls(Paths(Path(raw["runs"]), Path(raw["cache"]), Path(raw["results"])), str(raw["user"]),
                       int(raw["host_cpus"]), float(interval) if interval else None,
                       origin if isinstance(origin, str) else None)
        except (KeyError, TypeError, ValueError):
            return None


def spawn(run: RunDir, settings: Optional[Settings] = None, adopt: bool = False) -> int:
    """Start the supervisor of ``run`` and return its PID once it holds the run's lease. Without ``settings``, those
    the run's first supervisor was started with. With ``adopt``, another adopter may win the race: its PID is
    returned."""
    if settings is None:
        settings = Settings.of(run)
        if settings is None:
            raise OrchError(f"run {run.run_id} has no {SETTINGS_FILE}: no supervisor can plan it again; "
                            f"`orch down {run.run_id}` stops it")
    else:
        write_json(run.path / SETTINGS_FILE, settings.to_dict())
    env = dict(os.environ)
    package_root = str(Path(orchestrator.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", "orchestrator.run.supervise", str(run.path)] + (["--adopt"] if adopt else [])
    fd = os.open(run.path / ERR_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True,
                                close_fds=True, env=env)
    finally:
        os.close(fd)
    threading.Thread(target=proc.wait, name="orch-supervisor-reaper", daemon=True).start()  # a notebook lives on
    deadline = time.monotonic() + START_WAIT
    while True:
        pid = holder(run.path)
        if pid == proc.pid or (adopt and pid):
            return pid
        code = proc.poll()
        if code is not None:
            pid = holder(run.path)
            if adopt and pid:
                return pid
            raise OrchError(f"the supervisor of run {run.run_id} ended as it started (exit {code}): "
                            f"{_last_line(run.path / ERR_FILE)}")
        if time.monotonic() > deadline:
            proc.kill()
            raise OrchError(f"the supervisor of run {run.run_id} did not start in {START_WAIT:.0f} s; "
                            f"see {run.path / ERR_FILE}")
        time.sleep(0.02)


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    return lines[-1] if lines else "no output"


class Log:
    """What the supervisor says: one JSON line each in supervisor.log, appended and flushed as it is said."""

    def __init__(self, run: RunDir) -> None:
        fd = os.open(run.path / SUPERVISOR_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644)
        self.file = os.fdopen(fd, "w", encoding="utf-8")

    def __call__(self, message: str) -> None:
        self.file.write(dumps({"time": time.time(), "say": message}) + "\n")
        self.file.flush()


def _stop(_signum: int, _frame: Any) -> NoReturn:
    raise Stopped()


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.run.supervise",
                                     description="Supervise one orch run to its end (started by orch itself).")
    parser.add_argument("run_dir")
    parser.add_argument("--adopt", action="store_true", help="take over a run whose supervisor died")
    args = parser.parse_args(argv)
    run = RunDir(Path(args.run_dir))
    lease = acquire(run.path)
    if lease is None:
        return 0  # another supervisor holds the run
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        return _supervise(run, args.adopt)
    except Exception as exc:  # noqa: BLE001 - a run no supervisor can hold must not stay under way (adopted forever)
        _unsupervisable(run, f"its supervisor failed: {type(exc).__name__}: {exc}")
        raise
    finally:
        lease.release()


def _supervise(run: RunDir, adopt: bool) -> int:
    settings = Settings.of(run)
    if settings is not None and settings.framework_from:
        from orchestrator import frameworks

        frameworks.register_from(settings.framework_from)  # before the record's spec, which names it, is read
    info = run.record()
    if info is None or info.state.is_terminal:
        return 0
    if settings is None or info.spec is None:
        _unsupervisable(run, "its record or its supervisor's settings cannot be read by this orch")
        return 1
    from orchestrator import backends
    from orchestrator.plan import plan
    from orchestrator.run.runner import supervise

    p = plan(info.spec, settings.paths, user=settings.user, host_cpus=settings.host_cpus)
    try:
        artifact = (run.path / p.artifact_name).read_text()
    except OSError:
        artifact = None
    if artifact != p.artifact or Path(p.run_dir) != run.path:
        _unsupervisable(run, f"this orch plans run {run.run_id} otherwise than the orch that started it (orch was "
                             "changed under it)")
        return 1
    try:
        supervise(p, backends.for_spec(p.spec), run, info, say=Log(run), stats_interval=settings.stats_interval,
                  adopt=adopt)
    except (OrchError, KeyboardInterrupt):
        pass  # recorded in run.json, which the clients read
    return 0


def _unsupervisable(run: RunDir, reason: str) -> None:
    """Record a run under way that no supervisor can hold as failed, with ``reason``, its replicas stopped where the
    engine it ran on can be asked: `orch down` removes what is left."""
    info = run.record()
    if info is None or info.state.is_terminal:
        return
    try:
        from orchestrator import backends

        backends.for_record(run.plan_record()).cancel(run.run_id, run.artifact(), grace=5)
        stopped = "its replicas were stopped"
    except Exception:  # noqa: BLE001 - the record matters more: `orch down` removes the rest
        stopped = "`orch down` removes its replicas"
    info.state, info.supervisor_pid = RunState.FAILED, None
    info.error = f"{reason}, so no supervisor can hold it; {stopped}"
    run.write_record(info)


if __name__ == "__main__":
    sys.exit(main())
