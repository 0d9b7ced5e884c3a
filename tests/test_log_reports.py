"""Records on the replicas' stdout copied into the run directory (log_reports.py): whole runs through the runner
with a fake backend whose replicas print their records, as Swarm's do, and the copier against hostile output."""
from __future__ import annotations

import json
import os

import pytest

from orchestrator import contract
from orchestrator.errors import WorkerFailed
from orchestrator.run.copier import EVENT_LIMIT, ReportCopier, stamp_ns
from orchestrator.run.rundir import RunDir, RunState
from orchestrator.run.runner import apply
from tests.fakes import START, exits, running, trainer
from tests.test_runner import POLL, Harness


@pytest.fixture
def h(tmp_path) -> Harness:
    return Harness(tmp_path)


def events_of(p, key) -> list[dict]:
    path = p.run_dir / f"{key[0]}-{key[1]}" / contract.EVENTS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_run_reporting_on_stdout_succeeds_with_its_records_copied(h):
    p = h.plan(workers=2)
    backend = h.backend({0: trainer(), 1: trainer()}, reports_on_stdout=True, part_size=40)
    info = h.apply(p, backend)
    assert info.state == RunState.SUCCEEDED
    assert [w["test_accuracy"] for w in info.workers] == [0.9, 0.9]  # result.json, reassembled from its parts
    for i in range(2):
        assert events_of(p, ("worker", i)) == [line for key, line in backend.written if key == ("worker", i)]
        heartbeat = p.run_dir / f"worker-{i}" / contract.HEARTBEAT_FILE
        assert START + 4 <= heartbeat.stat().st_mtime <= START + 5  # the replica's last heartbeat time, not the copy's
    assert [e.event for e in h.events].count("done") == 2
    assert RunDir(p.run_dir).record().state == RunState.SUCCEEDED
    # The output is read at most once a second, each time from the second of its newest line on.
    sinces = [c.kwargs["since"] for c in backend.called("log_lines") if c.args == ("worker-0", "stdout")]
    assert sinces[0] is None and any(isinstance(s, int) for s in sinces)
    assert all(isinstance(s, int) for s in sinces if s is not None)


def test_a_stall_is_seen_through_stdout_heartbeats(h):
    p = h.plan(workers=2)
    backend = h.backend({0: trainer(), 1: trainer(stop_at=3)}, reports_on_stdout=True)
    with pytest.raises(WorkerFailed, match="training stalled: no worker made progress for 5 s"):
        h.apply(p, backend)


def test_a_restart_appends_the_new_attempts_events(h):
    p = h.plan(workers=2, max_restarts=1)
    first = {0: trainer(stop_at=3.5), 1: trainer(stop_at=3.5) + [exits(3.5, 137)]}
    second = {0: trainer(resumed_from=2), 1: trainer(resumed_from=2)}
    backend = h.backend([first, second], reports_on_stdout=True)
    info = h.apply(p, backend)
    assert info.state == RunState.SUCCEEDED and len(info.restarts) == 1
    epochs = [e["epoch"] for e in events_of(p, ("worker", 0)) if e["event"] == "epoch"]
    assert epochs == [1, 2]  # epoch 1 from the first attempt, epoch 2 from the second
    assert [e["epoch"] for e in events_of(p, ("worker", 1)) if e["event"] == "resumed"] == [2]


def test_file_reporting_backends_are_left_alone(h):
    p = h.plan(workers=2)
    backend = h.backend({0: trainer(), 1: trainer()})
    h.apply(p, backend)
    assert backend.called("log_lines") == [c for c in backend.called("log_lines") if c.kwargs["since"] is None]
    assert len(backend.called("log_lines")) == 4  # the logs saved at the end, stdout and stderr: nothing else


# -- the copier against what a replica may print ------------------------------------------------------
def copier_for(h, **fields):
    p = h.plan(workers=1, **fields)
    backend = h.backend({0: [running(0.1)]}, reports_on_stdout=True)
    RunDir(p.run_dir).create(p)
    backend.apply(p, p.artifact_file)
    copier = ReportCopier(backend, RunDir(p.run_dir), p.spec.replica_keys(), clock=h.clock, interval=0)
    return p, backend, copier


def say(backend, at: float, *lines: str) -> None:
    backend.extra_stdout.setdefault(("worker", 0), []).extend((START + at, line) for line in lines)


def test_hostile_lines_write_only_the_known_files_within_bounds(h):
    p, backend, copier = copier_for(h)
    folder = p.run_dir / "worker-0"
    (folder / "victim").write_text("keep")
    os.symlink(folder / "victim", folder / contract.RESULT_FILE)
    say(backend, 1,
        "@orch ../../escape.json 1/1 {}", "@orch predictions.npz 1/1 x", "@orch /etc/passwd 1/1 x",
        f"@orch events.jsonl 1/1 {'x' * (EVENT_LIMIT + 1)}",  # over the event bound (and the line's)
        "@orch events.jsonl 2/2 orphan part", "@orch events.jsonl 1/2 {\"a\":", "@orch events.jsonl 3/2 }",
        "@orch heartbeat 1/1 9e99", "@orch heartbeat 1/1 nan",
        '@orch result.json 1/1 {"planted": true}')
    h.clock.advance(2)
    copier.pull(backend.states(p.spec.run_id))
    assert sorted(f.name for f in folder.iterdir()) == ["heartbeat", "result.json", "victim"]
    assert (folder / "victim").read_text() == "keep"  # the link was replaced, never written through
    assert not (folder / contract.RESULT_FILE).is_symlink()
    assert json.loads((folder / contract.RESULT_FILE).read_text()) == {"planted": True}  # records.py judges it
    assert (folder / contract.HEARTBEAT_FILE).stat().st_mtime <= h.clock.time()  # the future counts as now
    assert not list(p.run_dir.parent.glob("escape.json"))


def test_lines_read_twice_are_copied_once(h):
    p, backend, copier = copier_for(h)
    say(backend, 1, '@orch events.jsonl 1/1 {"n":1}', '@orch events.jsonl 1/1 {"n":2}')
    h.clock.advance(1.5)
    copier.pull(backend.states(p.spec.run_id))
    say(backend, 1, '@orch events.jsonl 1/1 {"n":3}')  # the same time as the others, printed after them
    say(backend, 1.2, '@orch events.jsonl 1/2 {"n":', )
    copier.pull(backend.states(p.spec.run_id))
    say(backend, 1.7, '@orch events.jsonl 2/2 4}')  # a record's parts read in two pulls
    h.clock.advance(1)
    copier.pull(backend.states(p.spec.run_id))
    copier.pull(backend.states(p.spec.run_id), force=True)
    assert [json.loads(line)["n"] for line in (p.run_dir / "worker-0" / contract.EVENTS_FILE).read_text().split()] \
        == [1, 2, 3, 4]


def test_an_ended_replica_is_read_once_more_and_then_left(h):
    p, backend, copier = copier_for(h)
    backend.pending.append((("worker", 0), exits(0.5, 0)))
    h.clock.advance(1)
    states = backend.states(p.spec.run_id)
    copier.pull(states)
    copier.pull(states)
    assert len(backend.called("log_lines")) == 1
    copier.pull(states, force=True)
    assert len(backend.called("log_lines")) == 2


@pytest.mark.parametrize("stamp, ns", [
    ("2026-11-21T12:00:01.123456789Z", 1795262401123456789), ("2026-11-21T12:00:01Z", 1795262401000000000),
    ("2026-11-21T12:00:01.5Z", 1795262401500000000), ("garbage", None), ("2026-11-21T12:00:01.x5Z", None),
])
def test_engine_timestamps_to_nanoseconds(stamp, ns):
    assert stamp_ns(stamp) == ns


def test_the_runner_pulls_before_the_verdict(h):
    # A replica that prints its result and exits within one pull interval: its result is still copied.
    p = h.plan(workers=1)
    backend = h.backend({0: trainer(exit_after=0.01)}, reports_on_stdout=True)
    info = apply(p, backend=backend, paths=h.paths, poll=POLL, stats_interval=None, clock=h.clock)
    assert info.workers[0]["test_accuracy"] == 0.9


def test_a_detached_runs_records_are_copied_by_ps_and_down_once_each(h):
    from orchestrator.run import runs

    p = h.plan(workers=2)
    backend = h.backend({0: trainer(), 1: trainer()}, reports_on_stdout=True, part_size=40)
    h.apply(p, backend, detach=True)
    h.clock.advance(10)
    first = runs.ps([p.spec.run_id], paths=h.paths, backend=backend)[0]
    assert [w["test_accuracy"] for w in first.workers] == [0.9, 0.9]
    copied = events_of(p, ("worker", 0))
    assert copied == [line for key, line in backend.written if key == ("worker", 0)]
    runs.ps([p.spec.run_id], paths=h.paths, backend=backend)  # read again: the same records, not twice
    assert events_of(p, ("worker", 0)) == copied
    assert runs.down([p.spec.run_id], paths=h.paths, backend=backend) == [p.spec.run_id]
    assert events_of(p, ("worker", 0)) == copied
    assert [w["test_accuracy"] for w in RunDir(p.run_dir).record().workers] == [0.9, 0.9]
