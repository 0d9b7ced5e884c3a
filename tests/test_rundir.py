"""The run directory handle: records, events attributed by file, results, and finding runs."""
import json
import os
import time
import tracemalloc

import pytest

from orchestrator import contract
from orchestrator.errors import RunNotFound
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import plan
from orchestrator.run.rundir import RunDir, RunInfo, RunState, resolve, runs_in
from tests.bounds import HANG_S


@pytest.fixture
def paths(tmp_path):
    return Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")


def _made(paths, run_id="r1", workers=2, started=1.0, state=RunState.SUCCEEDED):
    spec = make_spec(run_id=run_id, workers=workers, dataset="synthetic")
    p = plan(spec, paths)
    run = RunDir(p.run_dir)
    run.create(p)
    run.write_record(RunInfo(run_id=run_id, state=state, spec=spec, started=started))
    return run, spec


def test_create_lays_out_the_folder_and_refuses_a_used_id(paths):
    run, spec = _made(paths)
    assert sorted(p.name for p in run.path.iterdir()) == ["compose.yml", "logs", "plan.json", "run.json", "shared",
                                                          "worker-0", "worker-1"]
    assert run.artifact() == run.path / "compose.yml"
    assert run.plan_record()["backend"] == "compose"
    with pytest.raises(Exception, match="already used"):
        run.create(plan(spec, paths))


def test_record_round_trips_with_a_typed_spec_and_state(paths):
    run, spec = _made(paths, state=RunState.TIMED_OUT)
    info = run.record()
    assert info.state is RunState.TIMED_OUT and info.state.is_terminal and info.spec == spec
    assert json.loads((run.path / "run.json").read_text())["state"] == "timed-out"


def test_a_record_of_the_flat_spec_earlier_orch_wrote_still_reads(paths):
    run, spec = _made(paths)
    (run.path / "run.json").write_text(json.dumps({"run_id": "r1", "state": "succeeded", "spec": spec.flat()}))
    assert run.record().spec == spec


def test_the_run_id_is_the_folders_name_not_what_the_record_says(paths):
    run, _ = _made(paths)
    (run.path / "run.json").write_text(json.dumps({"run_id": "../../etc", "state": "running"}))
    info = run.record()
    assert info.run_id == "r1" and info.state is RunState.RUNNING and info.spec is None


def test_events_are_attributed_to_the_file_they_came_from(paths):
    run, spec = _made(paths)
    v = contract.CONTRACT_VERSION
    lines = [{"v": v, "event": "epoch", "worker": 1, "time": 2.0, "epoch": 1},
             {"v": v, "event": "start", "worker": 1, "time": 1.0, "stage": "training"},
             {"v": v, "event": "epoch", "worker": 0, "time": 3.0, "epoch": 2}]  # forged: worker 0's, in worker-1's file
    (run.replica_dir(("worker", 1)) / contract.EVENTS_FILE).write_text(
        "".join(json.dumps(e) + "\n" for e in lines) + "not json\n" + '{"v": 1, "event": "epo')
    tailer = run.events(spec.replica_keys())
    read = tailer.read()
    assert [(key, e.event) for key, e in read] == [(("worker", 1), "start"), (("worker", 1), "epoch")]
    assert tailer.read() == []  # the half-written line waits for its newline


def test_results_fill_in_what_each_worker_wrote(paths):
    run, spec = _made(paths)
    (run.replica_dir(("worker", 0)) / contract.RESULT_FILE).write_text(json.dumps(
        {"v": contract.CONTRACT_VERSION, "worker": 0, "train_seconds": 3.0, "test_accuracy": 0.9,
         "samples_per_epoch": [5]}))
    results = run.results(spec.replica_keys())
    assert results[0]["test_accuracy"] == 0.9 and results[1]["test_accuracy"] is None
    assert RunInfo(run_id="r1", state=RunState.SUCCEEDED, spec=spec, workers=results).train_seconds == 3.0


def test_resolve_finds_the_newest_or_the_named_run(paths):
    _made(paths, "old", started=1.0)
    _made(paths, "new", started=2.0)
    assert [r.run_id for r in runs_in(paths)] == ["new", "old"]
    assert resolve(paths, None).run_id == "new" and resolve(paths, "old").run_id == "old"
    for bad in ("nope", "../runs", ".."):
        with pytest.raises(RunNotFound):
            resolve(paths, bad)


def test_two_claims_of_one_run_id_leave_the_winners_folder_alone(paths):
    import threading

    spec = make_spec(run_id="race", workers=2, dataset="synthetic")
    p = plan(spec, paths)
    start, outcomes = threading.Barrier(8), []

    def claim():
        start.wait()
        try:
            RunDir(p.run_dir).create(p)
            outcomes.append("won")
        except Exception as exc:  # noqa: BLE001 - the loser's error is what the test checks
            outcomes.append(type(exc).__name__ + ": " + str(exc))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("won") == 1
    assert all("already used" in o for o in outcomes if o != "won")
    assert sorted(x.name for x in p.run_dir.iterdir()) == ["compose.yml", "logs", "plan.json", "shared", "worker-0",
                                                          "worker-1"]


def test_results_and_heartbeats_refuse_links_fifos_and_forgeries(paths, tmp_path):
    import os

    run, spec = _made(paths)
    w0, w1 = run.replica_dir(("worker", 0)), run.replica_dir(("worker", 1))
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"v": contract.CONTRACT_VERSION, "worker": 0, "test_accuracy": 0.5}))
    os.symlink(secret, w0 / contract.RESULT_FILE)
    os.symlink(secret, w0 / contract.HEARTBEAT_FILE)
    os.mkfifo(w1 / contract.RESULT_FILE)  # must not block
    os.mkfifo(w1 / contract.HEARTBEAT_FILE)
    assert run.result(("worker", 0)) is None and run.result(("worker", 1)) is None
    assert run.heartbeat(("worker", 0)) == 0.0 and run.heartbeat(("worker", 1)) == 0.0
    os.unlink(w1 / contract.RESULT_FILE)
    (w1 / contract.RESULT_FILE).write_text(json.dumps({"v": contract.CONTRACT_VERSION, "worker": 0, "test_accuracy": 0.5}))
    assert run.result(("worker", 1)) is None  # worker 0's result in worker 1's folder
    (w1 / contract.RESULT_FILE).write_text(json.dumps({"v": contract.CONTRACT_VERSION, "worker": 1, "test_accuracy": 7}))
    assert run.result(("worker", 1)) is None  # out of range
    (w1 / contract.RESULT_FILE).write_text("[" * 100000)
    assert run.result(("worker", 1)) is None  # too deep to parse


def test_removing_the_shared_folder_never_follows_a_planted_link(paths, tmp_path):
    import os
    import shutil

    run, _ = _made(paths)
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious").write_text("x")
    (run.shared / "checkpoints").mkdir()
    os.symlink(keep, run.shared / "checkpoints" / "evil")
    os.symlink(tmp_path, run.shared / "evil-root")
    assert shutil.rmtree.avoids_symlink_attacks
    shutil.rmtree(run.shared)
    assert (keep / "precious").read_text() == "x" and not run.shared.exists()


# -- a worker's records for collect: a stream, bounded, kept only as far as the summary needs ----------------------
def _epoch_line(worker: int, epoch: int, when: float) -> bytes:
    return (json.dumps({"v": contract.CONTRACT_VERSION, "event": "epoch", "worker": worker, "time": when,
                        "epoch": epoch, "loss": 1.0 / epoch, "samples": 100, "seconds": 1.0}) + "\n").encode()


def _distinct_epochs(path, size: int, worker: int = 0) -> int:
    """``path`` filled with about ``size`` bytes of epoch records, every one of another epoch; how many."""
    lines, written, n = [], 0, 0
    while written < size:
        n += 1
        lines.append(_epoch_line(worker, n, 100.0 + n))
        written += len(lines[-1])
    path.write_bytes(b"".join(lines))
    return n


def test_worker_records_keep_one_record_per_epoch_of_the_job_and_count_the_rest(paths):
    run, _ = _made(paths)
    events = run.replica_dir(("worker", 0)) / contract.EVENTS_FILE
    written = _distinct_epochs(events, 256 << 10)
    with open(events, "ab") as f:  # epoch 2 redone after a restart: the later record counts
        f.write(_epoch_line(0, 2, 10_000.0).replace(b'"loss": 0.5', b'"loss": 0.25'))
    got = run.worker_records(("worker", 0), epochs=5)
    assert got.invalid is None and sorted(got.epochs) == [1, 2, 3, 4, 5] and got.epochs[2].loss == 0.25
    assert got.records == written + 1 and got.dropped == written - 5 and got.unread == 0 and got.capped is None


def test_worker_records_read_no_further_than_the_limit_however_large_the_file(paths, monkeypatch):
    """A file of 4 GiB (sparse: its records, then a hole) costs what its first EVENTS_LIMIT bytes cost."""
    from orchestrator.run import rundir

    monkeypatch.setattr(rundir, "EVENTS_LIMIT", 1 << 20)
    run, _ = _made(paths)
    events = run.replica_dir(("worker", 0)) / contract.EVENTS_FILE
    _distinct_epochs(events, 2 << 20)
    os.truncate(events, 4 << 30)
    started = time.monotonic()
    got = run.worker_records(("worker", 0), epochs=5)
    assert time.monotonic() - started < HANG_S
    assert got.invalid is None and len(got.epochs) == 5 and got.unread == (4 << 30) - (1 << 20)
    assert got.capped == f"its events.jsonl passed orch's limit of 1 MiB; the {got.unread:,} bytes past it were not read"
    assert got.records < (1 << 20) // 100  # records of the first MiB only


def test_worker_records_hold_memory_of_one_chunk_whatever_the_file_holds(paths):
    """Reading 4 MiB of distinct epoch records, 128 KiB at a time, holds less than 2 MiB at its peak."""
    run, _ = _made(paths)
    events = run.replica_dir(("worker", 0)) / contract.EVENTS_FILE
    _distinct_epochs(events, 4 << 20)
    tracemalloc.start()
    try:
        got = run.worker_records(("worker", 0), epochs=5, chunk=128 << 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got.invalid is None and len(got.epochs) == 5 and got.dropped > 25_000
    assert peak < 2 << 20, f"{peak:,} bytes at the peak"


def test_worker_records_stop_at_the_first_bad_record_and_keep_nothing_of_the_worker(paths):
    run, _ = _made(paths)
    folder = run.replica_dir(("worker", 1))
    (folder / contract.EVENTS_FILE).write_bytes(_epoch_line(1, 1, 1.0) + b"[1, 2]\n" + _epoch_line(1, 2, 2.0))
    (folder / contract.RESULT_FILE).write_text(json.dumps({"v": contract.CONTRACT_VERSION, "worker": 1,
                                                           "train_seconds": 3.0}))
    got = run.worker_records(("worker", 1), epochs=5)
    assert got.invalid == "record 2 of worker-1's events.jsonl is refused: not a JSON object"
    assert got.epochs == {} and got.result is None and got.records == 1
