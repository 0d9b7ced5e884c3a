"""The Run handle (api/handle.py) of a run started without waiting, against the scripted fake backend and clock: its
status, logs, wait (to the end, to a timeout, to a failure), cancel, and what a function returned; and how results show
in a notebook (display.py), escaped."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator import api
from orchestrator.errors import FunctionFailed, WorkerFailed
from orchestrator.jobspec import make_spec
from orchestrator.plan import plan
from orchestrator.run import function
from orchestrator.api.handle import Run, RunResult
from orchestrator.run.rundir import RunInfo, RunState
from tests.fakes import FakeBackend, FakeClock, exits, running, trainer
from tests.test_runner import Harness


@pytest.fixture
def h(tmp_path) -> Harness:
    return Harness(tmp_path)


def _handle(h: Harness, backend, run_id: str = "fake-run") -> Run:
    return Run(run_id, paths=h.paths, backend=backend, clock=h.clock, poll=0.5)


def test_a_detached_run_is_watched_to_its_end_and_finished_as_down_does(h):
    p = h.plan(workers=2)
    backend = h.backend({0: trainer(), 1: trainer()})
    h.apply(p, backend, detach=True)
    run = _handle(h, backend)
    assert run.status() == RunState.RUNNING
    assert [r.line for r in run.logs()]  # the lines its replicas wrote so far
    result = run.wait()
    assert isinstance(result, RunResult) and result.state == RunState.SUCCEEDED and result.returns == []
    assert [w["exit_code"] for w in result.workers] == [0, 0]
    assert backend.called("cancel") and not backend.replicas  # removed, as `orch down` removes them
    recorded = h.record(p)
    assert recorded.state == RunState.SUCCEEDED and recorded.wall_seconds is not None
    assert run.wait() is result and run.status() == RunState.SUCCEEDED


HOLD_LEASE = """
import sys, time
from pathlib import Path
from orchestrator.run import lease
held = lease.acquire(Path(sys.argv[1]))
print("held" if held else "taken", flush=True)
time.sleep(600)
"""


def test_wait_with_a_timeout_leaves_the_run_running_and_cancel_stops_its_supervisor(h):
    """A supervisor in another process holds the run's lease: wait(timeout) gives up waiting and leaves it; cancel()
    asks that process to stop the run (SIGTERM), waits for its end, then removes what is left."""
    p = h.plan(workers=2)
    backend = h.backend({0: trainer(epochs=50), 1: trainer(epochs=50)})
    h.apply(p, backend, detach=True)
    supervisor = subprocess.Popen([sys.executable, "-c", HOLD_LEASE, str(p.run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert supervisor.stdout.readline().strip() == "held"
        run = _handle(h, backend)
        with pytest.raises(TimeoutError, match="still runs after 3 s"):
            run.wait(timeout=3)
        assert not backend.called("cancel") and run.status() == RunState.RUNNING and run.supervised()
        run.cancel()
        assert supervisor.wait(10) == -signal.SIGTERM and not run.supervised()
    finally:
        supervisor.kill()
    assert backend.cancels and not backend.replicas and h.record(p).state == RunState.STOPPED
    assert run.wait().state == RunState.STOPPED  # cancelled: nothing failed, nothing returned


def test_a_run_used_as_a_context_manager_is_cancelled_when_its_block_raises_and_left_when_it_does_not(h):
    p = h.plan(workers=2)
    backend = h.backend({0: trainer(epochs=50), 1: trainer(epochs=50)})
    h.apply(p, backend, detach=True)
    with _handle(h, backend) as run:
        assert run.status() == RunState.RUNNING
    assert not backend.called("cancel")  # left as written: the run goes on
    with pytest.raises(ValueError, match="a check failed"):
        with _handle(h, backend):
            raise ValueError("a check failed")
    assert backend.cancels and not backend.replicas and h.record(p).state == RunState.STOPPED


def test_a_worker_that_fails_ends_the_wait_and_the_run(h):
    p = h.plan(workers=2)
    backend = h.backend({0: [running(0.1), exits(2, 3)], 1: [running(0.1)]})  # worker-1 would wait forever
    h.apply(p, backend, detach=True)
    with pytest.raises(WorkerFailed, match="worker-0 exited with code 3"):
        _handle(h, backend).wait()
    info = h.record(p)
    assert info.state == RunState.FAILED and [w["exit_code"] for w in info.workers] == [3, None]
    assert not backend.replicas



class PodsLater(FakeBackend):
    """As Kubernetes right after a Job is made: its pods are not listed for the first looks."""

    def __init__(self, *args, empty_looks: int = 3, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.empty_looks = empty_looks

    def states(self, run_id=None):
        if self.empty_looks > 0 and self.run_id is not None:
            self.empty_looks -= 1
            return []
        return super().states(run_id)


def test_a_replica_not_listed_yet_is_still_to_come_not_ended(h):
    p = h.plan(workers=2)
    backend = PodsLater(h.clock, {0: trainer(), 1: trainer()})
    h.apply(p, backend, detach=True)
    result = _handle(h, backend).wait()
    assert result.state == RunState.SUCCEEDED and [w["exit_code"] for w in result.workers] == [0, 0]
    assert not backend.replicas


def test_the_wall_time_is_the_runs_not_the_time_wait_was_called(h):
    h.clock = FakeClock(start=time.time())  # the replicas' end times on this host's clock, as an engine gives them
    p = h.plan(workers=1)
    backend = h.backend({0: [running(0.1), exits(1, 0)]})
    h.apply(p, backend, detach=True)
    h.clock.advance(5)  # the replica has ended
    time.sleep(1.5)  # and wait() is called a while later
    result = _handle(h, backend).wait()
    assert result.wall_seconds is not None and result.wall_seconds < 1.4


def test_a_parameter_server_job_ends_when_its_chief_and_workers_do(h):
    p = h.plan(workers=2, strategy="ps", parameter_servers=1)
    script = {key: [running(0.1)] + ([exits(2, 0)] if key[0] != "ps" else []) for key in p.spec.replica_keys()}
    backend = h.backend(script)
    h.apply(p, backend, detach=True)
    result = _handle(h, backend).wait(timeout=30)  # the parameter server never exits by itself
    assert result.state == RunState.SUCCEEDED and not backend.replicas

@pytest.fixture
def function_plan(h, tmp_path, monkeypatch):
    """A plan whose script is a function's entry script; the frameworks' data caches are not made."""
    monkeypatch.setattr("orchestrator.run.preflight._prepare_loaders", lambda *_args: None)
    folder = tmp_path / "fn"
    folder.mkdir()

    def rank():
        import os

        return int(os.environ["RANK"])

    entry = function.write_folder(rank, (), None, folder)
    spec = make_spec(workers=2, dataset="synthetic", script=str(entry), run_id="fake-fn")
    return plan(spec, h.paths, user="1000:1000", host_cpus=2)


def _returned(p, index: int, record: dict) -> None:
    (Path(p.run_dir) / f"worker-{index}" / function.RETURN_FILE).write_text(json.dumps(record))


def test_wait_reads_what_the_function_returned_on_each_worker(h, function_plan):
    p = function_plan
    backend = h.backend({0: [running(0.1), exits(2)], 1: [running(0.1), exits(2)]})
    h.apply(p, backend, detach=True)
    for i in range(2):
        _returned(p, i, {"v": 1, "ok": True, "value": {"rank": i}})
    result = _handle(h, backend, "fake-fn").wait()
    assert result.returns == [{"rank": 0}, {"rank": 1}] and result.state == RunState.SUCCEEDED
    assert function.name_of(Path(p.run_dir) / "source") == "rank"


def test_wait_raises_what_the_function_raised_naming_the_worker(h, function_plan):
    p = function_plan
    backend = h.backend({0: [running(0.1)], 1: [running(0.1), exits(2, 1)]})
    h.apply(p, backend, detach=True)
    _returned(p, 1, {"v": 1, "ok": False, "traceback": "Traceback (most recent call last):\nKeyError: 'x\x1b[2J'\n"})
    with pytest.raises(FunctionFailed) as caught:
        _handle(h, backend, "fake-fn").wait()
    assert caught.value.worker == 1 and caught.value.message.startswith("worker-1: rank() raised KeyError: 'x")
    assert "\x1b" not in caught.value.traceback and "\\x1b[2J" in caught.value.traceback
    assert h.record(p).state == RunState.FAILED and not backend.replicas


# -- in a notebook ----------------------------------------------------------------------------------------------
HOSTILE = "<script>alert('x')</script>&"


def test_results_show_as_escaped_html():
    result = RunResult(run_id="r<1>", state=RunState.FAILED, spec=None, error=HOSTILE,
                       workers=[{"role": "worker", "worker": 0, "exit_code": 1}], returns=[{"html": HOSTILE}])
    shown = result._repr_html_()
    assert "<script>" not in shown and "&lt;script&gt;" in shown and "r&lt;1&gt;" in shown
    collected = api.Collected(summaries=[{"run_id": HOSTILE}], comparison=[{"run_id": HOSTILE, "speedup": 1.5}])
    assert "<script>" not in collected._repr_html_() and "1.5" in collected._repr_html_()
    sweep = api.ExperimentRun(Path("/r/x"), Path("/r/x/report.md"), {HOSTILE: {"state": "failed", "error": HOSTILE}})
    assert "<script>" not in sweep._repr_html_() and sweep.failed == [HOSTILE]


def test_to_pandas_is_a_frame_or_one_line_without_pandas(monkeypatch):
    import builtins

    result = RunResult(run_id="r", state=RunState.SUCCEEDED, spec=None,
                       workers=[{"role": "worker", "worker": i, "exit_code": 0} for i in range(2)], returns=[0, 1])
    real = builtins.__import__

    def no_pandas(name, *args, **kwargs):
        if name == "pandas":
            raise ImportError("No module named 'pandas'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(ModuleNotFoundError, match=r"^to_pandas\(\) needs pandas, which orch does not install"):
        result.to_pandas()
    monkeypatch.undo()
    pandas = pytest.importorskip("pandas")
    frame = result.to_pandas()
    assert isinstance(frame, pandas.DataFrame) and list(frame["returned"]) == [0, 1]


def test_a_run_result_is_its_record_and_what_it_returned():
    info = RunInfo(run_id="r", state=RunState.SUCCEEDED, spec=None, wall_seconds=2.0)
    result = RunResult.of(info, [1, 2])
    assert result.to_dict() == info.to_dict() and result.returns == [1, 2] and isinstance(result, RunInfo)
