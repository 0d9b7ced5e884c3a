"""The runner through every way a run ends, against a scripted fake backend and a fake clock: no Docker.

Each test drives ``runner.apply`` end to end and checks what a user would see: the exception and its
message, the run record, and that the backend was told to stop the run. The messages are those of the
live fault tests (tests/test_runs_faults.py).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import contract
from orchestrator.docker.stats import usage_of
from orchestrator.errors import ContractMismatch, DockerError, ImageMissing, JobTimedOut, WorkerFailed
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import Plan, plan
from orchestrator.run.rundir import RunDir, RunInfo, RunState
from orchestrator.run.runner import apply
from orchestrator.run.supervisor import FINISH_GRACE
from tests.fakes import (
    FakeBackend,
    FakeClock,
    MiB,
    engine_stats,
    exits,
    paused,
    raw_event,
    raw_result,
    running,
    stage,
    trainer,
    trainer_end,
    vanishes,
)

POLL = 0.5
OTHERS = "; the other workers were stopped"


class Harness:
    """One fake world: a clock, folders, and what ``apply`` said and reported."""

    def __init__(self, root: Path) -> None:
        self.paths = Paths(root / "runs", root / "cache", root / "results")
        self.clock = FakeClock()
        self.said: list[str] = []
        self.events: list = []

    def plan(self, **fields) -> Plan:
        fields = {"workers": 3, "dataset": "synthetic", "samples": 6000, "epochs": 2, "stall_timeout": 5,
                  "startup_timeout": 5, "run_id": "fake-run", **fields}
        return plan(make_spec(**fields), self.paths, user="1000:1000", host_cpus=2)

    def backend(self, script=None, **kwargs) -> FakeBackend:
        return FakeBackend(self.clock, script, **kwargs)

    def apply(self, p: Plan, backend: FakeBackend, **kwargs) -> RunInfo:
        return apply(p, backend=backend, paths=self.paths, say=self.said.append, on_event=lambda _key, event: self.events.append(event),
                     poll=POLL, stats_interval=None, clock=self.clock, **kwargs)

    def record(self, p: Plan) -> RunInfo:
        info = RunDir(p.run_dir).record()
        assert info is not None, "no run.json"
        return info


@pytest.fixture
def h(tmp_path) -> Harness:
    return Harness(tmp_path)


def stuck_at(t: float, workers: int = 3, **faults):
    """Every replica trains until ``t`` and then makes no more progress; ``faults`` adds steps per index."""
    return {i: trainer(stop_at=t) + faults.get(f"w{i}", []) for i in range(workers)}


def exit_codes(info: RunInfo) -> list:
    return [w["exit_code"] for w in info.workers]


def assert_failed_record(h: Harness, p: Plan, error: str, state: RunState = RunState.FAILED) -> RunInfo:
    info = h.record(p)
    assert info.state == state and info.error == error
    assert info.spec == p.spec and info.wall_seconds is not None
    assert [w["worker"] for w in info.workers] == [0, 1, 2][: p.spec.workers]
    assert (p.run_dir / contract.SHARED_DIR).is_dir()  # kept: a failed run may be resumed
    return info


def stopped_within(backend: FakeBackend, start: float, end: float) -> None:
    """The first cancel came between ``start`` and ``end`` fake seconds."""
    at = backend.called("cancel")[0].kwargs["at"]
    assert start <= at <= end, f"cancelled at {at} s, expected within [{start}, {end}]"


# -- failures -------------------------------------------------------------------------------------------
def test_worker_exiting_non_zero_fails_the_run_with_its_logs(h):
    p = h.plan(max_restarts=1)  # a program's own exit code is never retried
    backend = h.backend(stuck_at(4, w1=[exits(4, 3)]))
    with pytest.raises(WorkerFailed) as caught:
        h.apply(p, backend)
    exc = caught.value
    assert exc.message == "worker-1 exited with code 3" + OTHERS
    assert (exc.worker, exc.worker_exit_code, exc.retryable) == (1, 3, False)
    assert "worker-1 attempt 1: loading synthetic data" in exc.details
    assert "Traceback (most recent call last): boom" in exc.details.splitlines()[-1]
    assert "cpu_feature_guard" not in exc.details  # TensorFlow's noise is left out
    assert [c.kwargs["tail"] for c in backend.called("logs")] == [200]
    assert backend.called("logs")[0].args == ("worker-1",)
    info = assert_failed_record(h, p, exc.message)
    assert exit_codes(info) == [None, 3, None] and info.restarts == []
    assert backend.call_names.count("apply") == 1 and backend.cancels == [5]
    stopped_within(backend, 4, 4 + POLL)
    for i in range(3):  # every replica's output outlives it
        assert f"worker-{i} attempt 1: epoch 1/2" in (p.run_dir / "logs" / f"worker-{i}.log").read_text()


def test_worker_killed_by_a_signal_fails_when_no_restart_is_allowed(h):
    p = h.plan(max_restarts=0)
    backend = h.backend(stuck_at(4, w1=[exits(4, 137)]))
    with pytest.raises(WorkerFailed) as caught:
        h.apply(p, backend)
    exc = caught.value
    assert exc.message == "worker-1 was killed by signal 9 (exit 137)" + OTHERS
    assert (exc.worker, exc.worker_exit_code, exc.retryable) == (1, 137, True)
    info = assert_failed_record(h, p, exc.message)  # no "(after 0 restarts)"
    assert exit_codes(info) == [None, 137, None]
    assert backend.call_names.count("apply") == 1 and backend.cancels == [5]
    stopped_within(backend, 4, 4 + POLL)


def test_vanished_worker_is_named_and_the_rest_stopped(h):
    p = h.plan()
    backend = h.backend(stuck_at(4, w2=[vanishes(4)]))
    with pytest.raises(WorkerFailed) as caught:
        h.apply(p, backend)
    exc = caught.value
    assert exc.message == "worker-2 vanished (its container was removed from outside orch)" + OTHERS
    assert (exc.worker, exc.worker_exit_code, exc.retryable, exc.details) == (2, None, True, "")
    assert backend.called("logs") == []  # nothing left to read
    info = assert_failed_record(h, p, exc.message)
    assert exit_codes(info) == [None, None, None]
    assert backend.cancels == [5]
    stopped_within(backend, 4, 4 + POLL)
    assert not (p.run_dir / "logs" / "worker-2.log").exists() and (p.run_dir / "logs" / "worker-0.log").exists()


def test_paused_worker_fails_the_run_after_the_stall_timeout(h):
    p = h.plan()
    backend = h.backend(stuck_at(4, w1=[paused(4)]))  # the others block in the all-reduce
    with pytest.raises(WorkerFailed) as caught:
        h.apply(p, backend)
    exc = caught.value
    assert exc.message == ("training stalled: no worker made progress for 5 s; worker-1's container is paused"
                           + OTHERS)
    assert (exc.worker, exc.worker_exit_code, exc.retryable) == (1, None, True)
    assert backend.called("stats_once") == []  # the culprit is known: no need to look at memory
    assert_failed_record(h, p, exc.message)
    assert backend.cancels == [5]
    last_heartbeat = 3.0
    stopped_within(backend, last_heartbeat + 5, last_heartbeat + 5 + POLL)


@pytest.mark.parametrize("late", [
    pytest.param([], id="never-started"),
    pytest.param([running(0.1), stage(0.2, "importing"), paused(0.3)], id="paused-while-importing"),
])
def test_worker_that_never_joins_times_out_and_is_named(h, late):
    p = h.plan(max_restarts=2)  # a start-up timeout is not restarted
    # the others join and then wait for their missing peer
    backend = h.backend({0: trainer(stop_at=1.5), 1: late, 2: trainer(stop_at=1.5)})
    with pytest.raises(JobTimedOut) as caught:
        h.apply(p, backend)
    assert caught.value.message == ("worker-1 did not join the cluster within the startup timeout of 5 s"
                                    + OTHERS + "; raise --startup-timeout if start-up is just slow here")
    assert_failed_record(h, p, caught.value.message, RunState.TIMED_OUT)
    assert backend.call_names.count("apply") == 1 and backend.cancels == [5]
    stopped_within(backend, 5, 5 + POLL)


def test_oom_killed_worker_is_not_retried_and_says_raise_memory(h):
    p = h.plan(max_restarts=2)
    backend = h.backend(stuck_at(4, w0=[exits(4, 137, oom_killed=True)]))
    with pytest.raises(WorkerFailed) as caught:
        h.apply(p, backend)
    exc = caught.value
    assert exc.message == "worker-0 was killed for exceeding its memory limit (exit 137); raise --memory" + OTHERS
    assert (exc.worker, exc.worker_exit_code, exc.retryable) == (0, 137, False)
    info = assert_failed_record(h, p, exc.message)
    assert info.restarts == [] and backend.call_names.count("apply") == 1 and backend.cancels == [5]


@pytest.mark.parametrize("workers, starved", [(1, 0), (3, 1)])
def test_memory_starved_stall_names_the_worker_and_its_limit(h, workers, starved):
    p = h.plan(workers=workers, memory_mb=256)
    backend = h.backend(stuck_at(4, workers), memory={starved: (250 * MiB, 256 * MiB)})
    with pytest.raises(WorkerFailed) as caught:
        h.apply(p, backend)
    exc = caught.value
    assert exc.message == (f"training stalled: no worker made progress for 5 s; worker-{starved} is using 250 MiB "
                           "of its 256 MiB memory limit; raise --memory" + (OTHERS if workers > 1 else ""))
    assert exc.worker == starved and exc.worker_exit_code is None
    assert sorted(c.args[0] for c in backend.called("stats_once")) == [f"worker-{i}" for i in range(workers)]
    assert_failed_record(h, p, exc.message)
    assert backend.cancels == [5]


def test_stall_with_no_culprit_points_at_the_logs(h):
    p = h.plan()
    backend = h.backend(stuck_at(4))  # every worker well within its memory
    with pytest.raises(WorkerFailed) as caught:
        h.apply(p, backend)
    exc = caught.value
    assert exc.message == "training stalled: no worker made progress for 5 s; a worker is stuck (see `orch logs`)" + OTHERS
    assert exc.worker == -1 and exc.details == ""
    assert_failed_record(h, p, exc.message)
    stopped_within(backend, 3 + 5, 3 + 5 + POLL)


# -- restarts -------------------------------------------------------------------------------------------
def test_restartable_failure_restarts_the_group_and_then_succeeds(h):
    p = h.plan(max_restarts=1)
    first = stuck_at(4, w1=[exits(4, 137)])  # epoch 1 was checkpointed at 3 s
    second = {i: trainer(resumed_from=2) for i in range(3)}
    backend = h.backend([first, second])
    info = h.apply(p, backend)
    cause = "worker-1 was killed by signal 9 (exit 137)" + OTHERS
    assert info.state == RunState.SUCCEEDED and info.error is None
    assert [c for c in backend.call_names if c in ("apply", "cancel")] == ["apply", "cancel", "apply", "cancel"]
    # Staged again before the restart: the replicas get what they need as the images are now.
    assert [c for c in backend.call_names if c in ("stage", "apply")] == ["stage", "apply", "stage", "apply"]
    assert backend.cancels == [5, 0]  # the failed attempt gets a grace; the finished run none
    assert f"{cause}; restarting the whole group from its last checkpoint (restart 1 of 1)" in h.said
    record = h.record(p)
    assert record.state == RunState.SUCCEEDED and record.error is None
    (restart,) = record.restarts
    assert {k: restart[k] for k in ("attempt", "worker", "exit_code", "cause")} == {
        "attempt": 2, "worker": 1, "exit_code": 137, "cause": cause}
    assert isinstance(restart["time"], float)
    assert exit_codes(record) == [0, 0, 0] and record.test_accuracy == 0.9
    assert [e.epoch for e in h.events if e.event == "resumed"] == [2, 2, 2]
    log = (p.run_dir / "logs" / "worker-1.log").read_text()
    assert "worker-1 attempt 1:" in log and "worker-1 attempt 2:" in log  # both attempts' output kept
    assert not (p.run_dir / contract.SHARED_DIR).exists()


def test_each_attempts_lines_and_each_replicas_changes_reach_the_watcher_as_the_run_goes(h):
    """What `orch up` shows live: every line the replicas print (the frameworks' noise left out), each attempt's,
    and each replica's status as it changes, its exit code with it."""
    p = h.plan(max_restarts=1)
    lines, states = [], []
    backend = h.backend([stuck_at(4, w1=[exits(4, 137)]), {i: trainer(resumed_from=2) for i in range(3)}])
    info = h.apply(p, backend, on_line=lines.append, on_state=states.append)
    assert info.state == RunState.SUCCEEDED
    shown = {(r.replica, r.stream, r.line) for r in lines}
    for i in range(3):
        for attempt in (1, 2):
            assert (f"worker-{i}", "stdout", f"worker-{i} attempt {attempt}: epoch 1/2 - loss 0.9") in shown
    assert not any("cpu_feature_guard" in r.line for r in lines)
    assert len(lines) == len(shown)  # each line once
    by = {}
    for s in states:
        by.setdefault(s.label, []).append((s.status.value, s.exit_code))
    assert ("failed", 137) in by["worker-1"] and by["worker-1"][-1] == ("succeeded", 0)
    assert all(changes[-1] == ("succeeded", 0) and ("running", None) in changes for changes in by.values())
    assert all(a != b for changes in by.values() for a, b in zip(changes, changes[1:]))  # changes only


def test_stalled_group_restarts_with_no_named_worker(h):
    p = h.plan(max_restarts=1)
    backend = h.backend([stuck_at(4), {i: trainer(resumed_from=2) for i in range(3)}])
    info = h.apply(p, backend)
    assert info.state == RunState.SUCCEEDED
    (restart,) = h.record(p).restarts
    assert restart["worker"] == -1 and restart["exit_code"] is None and "a worker is stuck" in restart["cause"]


def test_restarts_exhausted_fail_the_run_saying_how_many(h):
    p = h.plan(max_restarts=1)
    backend = h.backend([stuck_at(4, w1=[exits(4, 137)]), stuck_at(4, w0=[exits(4, 137)])])
    with pytest.raises(WorkerFailed) as caught:
        h.apply(p, backend)
    exc = caught.value
    assert exc.message == "worker-0 was killed by signal 9 (exit 137)" + OTHERS and exc.retryable
    info = assert_failed_record(h, p, exc.message + " (after 1 restarts)")
    assert [r["worker"] for r in info.restarts] == [1]
    assert exit_codes(info) == [137, None, None]
    assert backend.call_names.count("apply") == 2 and backend.cancels == [5, 5]


# -- success --------------------------------------------------------------------------------------------
def test_success_when_every_replica_exits_zero(h):
    p = h.plan()
    backend = h.backend({i: trainer() for i in range(3)})
    info = h.apply(p, backend)
    end = trainer_end()
    assert info.state == RunState.SUCCEEDED and info.error is None
    record = h.record(p)
    assert record.to_dict() == {**info.to_dict(), "run_dir": str(p.run_dir)}
    assert record.spec == p.spec and record.restarts == []
    assert exit_codes(record) == [0, 0, 0]
    assert [w["stopped_after_result"] for w in record.workers] == [False] * 3
    assert record.train_seconds == end - 1.0 and record.test_accuracy == 0.9
    assert record.workers[0]["replicas"] == 3 and record.workers[0]["global_batch"] == 96
    assert backend.call_names[:3] == ["preflight", "stage", "apply"] and backend.cancels == [0]
    stopped_within(backend, end + 0.5, end + 0.5 + POLL)
    assert not (p.run_dir / contract.SHARED_DIR).exists()
    assert h.said[0] == f"starting run fake-run: 3 worker(s), image {p.image}"
    kinds = [(e.worker, e.event, getattr(e, "stage", None)) for e in h.events]
    for i in range(3):
        assert [k for k in kinds if k[0] == i] == [
            (i, "start", "importing"), (i, "start", "connecting"), (i, "start", "training"),
            (i, "epoch", None), (i, "epoch", None), (i, "done", None)]
    assert all((p.run_dir / "logs" / f"worker-{i}.log").stat().st_size > 0 for i in range(3))


def test_success_when_every_result_is_written_but_one_replica_lingers(h):
    p = h.plan()
    backend = h.backend({0: trainer(), 1: trainer(exit_code=None), 2: trainer()})  # worker-1 idles in teardown
    info = h.apply(p, backend)
    assert info.state == RunState.SUCCEEDED
    record = h.record(p)
    assert record.state == RunState.SUCCEEDED and record.error is None
    assert exit_codes(record) == [0, None, 0]
    assert [w["stopped_after_result"] for w in record.workers] == [False, True, False]
    assert [w["test_accuracy"] for w in record.workers] == [0.9] * 3
    assert backend.cancels == [0]
    done = trainer_end()
    stopped_within(backend, done + FINISH_GRACE, done + FINISH_GRACE + 2 * POLL)


# -- interruptions and the unexpected ---------------------------------------------------------------------
def test_ctrl_c_stops_the_run_and_is_re_raised(h):
    p = h.plan()
    backend = h.backend({i: trainer() for i in range(3)}, states_raises=[(3.0, KeyboardInterrupt())])
    with pytest.raises(KeyboardInterrupt):
        h.apply(p, backend)
    info = assert_failed_record(h, p, "interrupted by the user", RunState.INTERRUPTED)
    assert exit_codes(info) == [None, None, None]
    assert backend.cancels == [5]
    assert h.said[-1] == f"interrupted: containers removed; what was written is in {p.run_dir}"
    assert (p.run_dir / "logs" / "worker-0.log").exists()


@pytest.mark.parametrize("where", ["saving-logs", "stopping"])
def test_second_ctrl_c_during_the_clean_up_forces_the_removal(h, where):
    script = {i: trainer() for i in range(3)}
    if where == "saving-logs":
        backend = h.backend(script, states_raises=[(3.0, KeyboardInterrupt()), (3.0, KeyboardInterrupt())])
    else:
        backend = h.backend(script, states_raises=[(3.0, KeyboardInterrupt())], cancel_raises=[KeyboardInterrupt()])
    p = h.plan()
    with pytest.raises(KeyboardInterrupt):
        h.apply(p, backend)
    info = h.record(p)
    assert info.state == RunState.INTERRUPTED
    assert info.error == "interrupted; clean-up forced by a second interrupt"
    assert backend.cancels == [5, 0]  # the gentle stop, then the forced one


def test_unexpected_backend_error_still_ends_the_record_and_stops_the_run(h):
    p = h.plan()
    backend = h.backend({i: trainer() for i in range(3)}, states_raises=[(3.0, RuntimeError("engine went away"))])
    with pytest.raises(RuntimeError, match="engine went away"):
        h.apply(p, backend)
    info = assert_failed_record(h, p, "internal error: RuntimeError: engine went away")
    assert info.state.is_terminal
    assert backend.cancels == [5]


def test_events_of_another_contract_version_fail_the_run(h):
    p = h.plan()
    stale = raw_event(0.3, {"v": contract.CONTRACT_VERSION + 1, "event": "start", "stage": "importing"})
    backend = h.backend({0: [running(0.1), stale], 1: trainer(), 2: trainer()})
    with pytest.raises(ContractMismatch) as caught:
        h.apply(p, backend)
    assert caught.value.message.startswith(
        f"an event of worker-0 is of contract version {contract.CONTRACT_VERSION + 1}, and this orch reads "
        f"version {contract.CONTRACT_VERSION}; rebuild the images")
    assert_failed_record(h, p, caught.value.message)
    assert backend.cancels == [5]


def test_engine_gone_during_the_clean_up_still_ends_the_record(h):
    p = h.plan()
    gone = RuntimeError("Cannot connect to the Docker daemon")
    backend = h.backend({i: trainer() for i in range(3)}, states_raises=[(3.0, gone), (3.0, gone)],
                        cancel_raises=[gone])
    with pytest.raises(RuntimeError, match="Cannot connect"):
        h.apply(p, backend)
    assert backend.cancels == [5]  # it was tried
    info = h.record(p)
    assert info.state == RunState.FAILED, f"run.json says {info.state.value!r}"
    assert "Cannot connect to the Docker daemon" in (info.error or "")


def test_result_of_another_contract_version_still_ends_the_record(h):
    p = h.plan()
    v = contract.CONTRACT_VERSION + 1
    backend = h.backend({0: [running(0.1), raw_result(0.2, {"v": v, "worker": 0, "test_accuracy": 0.9}),
                             raw_event(0.3, {"v": v, "event": "done", "train_seconds": 1.0, "test_accuracy": 0.9})],
                         1: trainer(), 2: trainer()})
    with pytest.raises(ContractMismatch):
        h.apply(p, backend)
    assert backend.cancels == [5]
    info = h.record(p)
    assert info.state == RunState.FAILED, f"run.json says {info.state.value!r}"
    assert "contract version" in (info.error or "")


def test_failed_launch_is_recorded_and_cleaned_up(h):
    p = h.plan()
    backend = h.backend(apply_raises=[DockerError("docker compose up failed: port is already allocated")])
    with pytest.raises(DockerError):
        h.apply(p, backend)
    assert_failed_record(h, p, "docker compose up failed: port is already allocated")
    assert backend.cancels == [5]  # whatever half-started is removed


def test_failed_preflight_creates_nothing(h):
    p = h.plan()
    backend = h.backend(preflight_error=ImageMissing("image orch-trainer is missing; run `orch build` first"))
    with pytest.raises(ImageMissing):
        h.apply(p, backend)
    assert backend.call_names == ["preflight"]
    assert not p.run_dir.exists()


def test_detach_returns_once_the_replicas_are_started(h):
    p = h.plan()
    backend = h.backend({i: trainer() for i in range(3)})
    info = h.apply(p, backend, detach=True)
    assert info.state == RunState.RUNNING and h.record(p).state == RunState.RUNNING
    assert backend.call_names == ["preflight", "stage", "apply"]  # not watched, not stopped


# -- the fake itself ------------------------------------------------------------------------------------
def test_fake_stats_are_what_the_engine_api_reports():
    sample = usage_of(engine_stats(250 * MiB, 256 * MiB))
    assert (sample.mem_used_bytes, sample.mem_limit_bytes) == (250 * MiB, 256 * MiB)
    assert sample.cpu_percent > 0 and sample.pids == 23


def test_fake_clock_sleeps_without_sleeping():
    clock = FakeClock()
    clock.sleep(100.0)
    assert clock.monotonic() == 100.0 and clock.time() == clock.start + 100.0 and clock.sleeps == [100.0]


def test_two_ups_with_one_run_id_leave_the_winner_alone(tmp_path):
    import threading

    results: dict[str, object] = {}
    start = threading.Barrier(2)

    def up(name: str) -> None:
        h = Harness(tmp_path)  # each its own clock and backend, the same runs folder
        p = h.plan(workers=2)
        backend = h.backend({i: trainer() for i in range(2)})
        start.wait()
        try:
            results[name] = h.apply(p, backend).state
        except Exception as exc:  # noqa: BLE001 - the loser's error is what the test checks
            results[name] = exc
        results[name + "-cancels"] = backend.cancels

    threads = [threading.Thread(target=up, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outcomes = [results["a"], results["b"]]
    assert RunState.SUCCEEDED in outcomes
    (loser,) = [o for o in outcomes if o != RunState.SUCCEEDED]
    assert "run_id: fake-run is already used" in str(loser)
    loser_name = "a" if results["a"] is loser else "b"
    assert results[loser_name + "-cancels"] == []  # it started nothing and removed nothing
    info = RunDir(tmp_path / "runs" / "fake-run").record()
    assert info.state == RunState.SUCCEEDED and [w["test_accuracy"] for w in info.workers] == [0.9, 0.9]


def test_a_failed_one_shot_reading_falls_back_to_the_runs_recent_stats_sample(tmp_path):
    """A container starved at its limit can fail the one-shot stats call itself: the host's own sample of the
    last seconds then names it; an old sample does not."""
    import time as real_time
    from types import SimpleNamespace

    from orchestrator.backends import Status
    from orchestrator.run.rundir import RunDir
    from orchestrator.run.attempt import _memory
    from orchestrator.run.stats import STATS_FIELDS

    run = RunDir(tmp_path / "starved")
    run.path.mkdir()
    now = real_time.time()
    rows = [{"time": now - 60, "worker": 1, "mem_used_bytes": 250 * MiB},  # old: not this moment's
            {"time": now - 2, "worker": 0, "mem_used_bytes": 255 * MiB}]
    with (run.path / "stats.csv").open("w") as f:
        f.write(",".join(STATS_FIELDS) + "\n")
        for r in rows:
            full = {"container": "c", "cpu_percent": 100, "mem_limit_bytes": 256 * MiB, "net_rx_bytes": 0,
                    "net_tx_bytes": 0, "blk_read_bytes": 0, "blk_write_bytes": 0, "pids": 9, "role": "worker",
                    "mem_charged_bytes": 256 * MiB, **r}
            f.write(",".join(str(full[k]) for k in STATS_FIELDS) + "\n")
    backend = SimpleNamespace(stats_once=lambda state: None)
    states = [SimpleNamespace(key=("worker", i), status=Status.RUNNING) for i in (0, 1)]
    memory = _memory(backend, states, run)
    assert list(memory) == [("worker", 0)] and memory[("worker", 0)].starved() == 255 * MiB
