"""`orch ps` and `orch down` against a fake backend: live replicas decide, a run nobody watches is lost."""
import os
import subprocess

import pytest

from orchestrator.backends import Backend, ReplicaState, Status
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan
from orchestrator.run import lease
from orchestrator.run.lease import holder
from orchestrator.run.rundir import RunDir, RunInfo, RunState
from orchestrator.run.runs import down, ps


class Engine(Backend):
    """Replicas by run; cancel records what it removed."""

    name = "compose"

    def __init__(self, live=None):
        self.live = live or {}
        self.cancelled = []

    def states(self, run_id=None):
        return [s for run, states in self.live.items() for s in states if run_id in (None, run)]

    def log_lines(self, replica, stream, follow=False, since=None):
        return iter(())

    def cancel(self, run_id, artifact, grace):
        self.cancelled.append(run_id)
        self.live.pop(run_id, None)


@pytest.fixture
def paths(tmp_path):
    return Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")


HELD = []  # the leases of the runs a test says are supervised: held by this process, as a supervisor holds them


@pytest.fixture(autouse=True)
def _release_leases():
    yield
    while HELD:
        HELD.pop().release()


def _recorded(paths, run_id, state, pid=None, supervised=False):
    spec = make_spec(run_id=run_id, workers=1, dataset="synthetic")
    p = plan(spec, paths)
    run = RunDir(p.run_dir)
    run.create(p)
    run.write_record(RunInfo(run_id=run_id, state=state, spec=spec, started=1.0, supervisor_pid=pid))
    if supervised:
        HELD.append(lease.acquire(run.path))
    return run


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_supervisor_is_found_by_its_lease_not_by_its_pid(paths):
    """A recorded PID that is alive (this test's own) does not make a run supervised; the lease does, and the kernel
    drops it with its holder."""
    run = _recorded(paths, "reused-pid", RunState.RUNNING, pid=os.getpid())
    assert holder(run.path) is None
    held = lease.acquire(run.path)
    assert held is not None and holder(run.path) == os.getpid() and lease.acquire(run.path) is None
    held.release()
    assert holder(run.path) is None


def test_a_running_run_with_no_replicas_and_no_orch_is_lost(paths):
    _recorded(paths, "orphan", RunState.RUNNING, pid=_dead_pid())
    _recorded(paths, "watched", RunState.STARTING, supervised=True)  # its supervisor is alive: still starting
    _recorded(paths, "done", RunState.SUCCEEDED)
    states = {r.run_id: r.state for r in ps(paths=paths, backend=Engine())}
    assert states == {"orphan": RunState.LOST, "watched": RunState.STARTING, "done": RunState.SUCCEEDED}


def test_live_replicas_decide_the_state_of_a_run_still_up(paths):
    _recorded(paths, "up", RunState.RUNNING)
    replica = ReplicaState(id="c", name="n", run="up", role="worker", index=0, status=Status.FAILED, exit_code=3,
                           finished_at=2.0)
    assert ps(paths=paths, backend=Engine({"up": [replica]}))[0].state == RunState.FAILED


def test_down_of_a_lost_run_records_it_stopped(paths):
    run = _recorded(paths, "orphan", RunState.RUNNING, pid=_dead_pid())
    engine = Engine()
    assert down(["orphan"], paths=paths, backend=engine) == ["orphan"]
    assert run.record().state == RunState.STOPPED and engine.cancelled == []


class StoppedEngine(Engine):
    """An engine that does not answer, as the Docker SDK's client reports one."""

    def states(self, run_id=None):
        from orchestrator.errors import EngineUnreachable

        raise EngineUnreachable("cannot reach the Docker engine at unix:///nowhere; start it")


def test_with_the_engine_stopped_ps_lists_the_runs_as_their_records_left_them(paths):
    _recorded(paths, "done", RunState.SUCCEEDED)
    _recorded(paths, "failed", RunState.FAILED)
    _recorded(paths, "detached", RunState.RUNNING)  # no orch watches it: only the engine knows if it still runs
    _recorded(paths, "watched", RunState.RUNNING, supervised=True)
    said = []
    states = {r.run_id: r.state for r in ps(paths=paths, backend=StoppedEngine(), say=said.append)}
    assert states == {"done": RunState.SUCCEEDED, "failed": RunState.FAILED, "detached": RunState.UNKNOWN,
                      "watched": RunState.RUNNING}
    assert len(said) == 1 and "no live state" in said[0] and "cannot reach the Docker engine" in said[0]
    assert [r.run_id for r in ps(["done"], paths=paths, backend=StoppedEngine())] == ["done"]


def test_orch_ps_with_no_engine_lists_finished_runs_and_says_so_in_one_line(tmp_path, monkeypatch):
    """The CLI end to end, with DOCKER_HOST pointing nowhere: the real client, not a fake, finds no engine."""
    from tests.test_cli_inprocess import orch

    for name in ("RUNS", "CACHE", "RESULTS"):
        monkeypatch.setenv(f"ORCH_{name}_DIR", str(tmp_path / name.lower()))
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setenv("COLUMNS", "200")
    _recorded(Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results"), "yesterday",
              RunState.SUCCEEDED)
    result = orch("ps")
    assert result.code == 0 and "yesterday" in result.out and "succeeded" in result.out, result
    (line,) = result.err.strip().splitlines()
    assert line.startswith("orch: showing the runs as their records left them; no live state")
    missing = orch("ps", "no-such-run")  # an error is the only line
    assert missing.code == 2 and missing.err.strip().splitlines() == ["orch: error: no run 'no-such-run'; `orch ps` "
                                                                      "lists the runs"]
