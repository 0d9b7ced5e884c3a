"""A run's summary (collect.summarize), to the digit, from run folders written here: which worker each figure is
taken from, what counts the serving replicas, and what a failed, partial or spec-less run still says. No engine, no
plots: pinned where mutation testing (benchmarks/mutation.py) found tests/test_collect.py left summarize open."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pytest

from orchestrator import contract
from orchestrator.analysis.collect import summarize
from orchestrator.errors import RunNotFound
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.run.rundir import RUN_FILE, RunDir, RunInfo, RunState
from orchestrator.run.stats import STATS_FIELDS


def event(worker: int, kind: str, when: float, **fields: Any) -> str:
    return json.dumps({"v": contract.CONTRACT_VERSION, "event": kind, "worker": worker, "time": when, **fields})


def epochs(worker: int, losses: tuple[float, ...], seconds: Optional[tuple[float, ...]] = None, **per_epoch) -> list:
    """One epoch event a loss, with ``seconds`` and any other figures (a tuple each) where given."""
    out = []
    for n, loss in enumerate(losses):
        extra = {k: v[n] for k, v in per_epoch.items()}
        if seconds is not None:
            extra["seconds"] = seconds[n]
        out.append(event(worker, "epoch", 100.0 + n, epoch=n + 1, epochs=len(losses), loss=loss, samples=1900, **extra))
    return out


def result(worker: int, train: float, accuracy: float, samples: list[int]) -> dict:
    return {"v": contract.CONTRACT_VERSION, "worker": worker, "replicas": 2, "global_batch": 96, "steps_per_epoch": 40,
            "samples_per_epoch": samples, "train_seconds": train, "test_accuracy": accuracy}


def stats(role: str, worker: int, cpus: tuple[float, ...], rx: int, tx: int) -> list[dict]:
    """A replica's stats rows: its CPU at each sample, its network counters growing to ``rx`` and ``tx``."""
    return [{"time": 100 + t, "worker": worker, "container": f"c-{role}-{worker}", "cpu_percent": cpu,
             "mem_used_bytes": 10**8 + t, "mem_limit_bytes": 2**31, "net_rx_bytes": rx * (t + 1) // len(cpus),
             "net_tx_bytes": tx * (t + 1) // len(cpus), "blk_read_bytes": 7 * t, "blk_write_bytes": 9 * t,
             "pids": 9, "role": role, "mem_charged_bytes": 0} for t, cpu in enumerate(cpus)]


def write_run(tmp_path: Path, spec, events: dict, results: dict, rows: list[dict], state=RunState.SUCCEEDED,
              recorded: Optional[list[dict]] = None, restarts: Optional[list] = None, error=None) -> RunDir:
    """A run folder as runner.apply leaves it: each replica's events and result (by key), stats.csv, run.json."""
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    run = RunDir.of(paths, "r")
    for key in (spec.replica_keys() if spec is not None else []):
        folder = run.replica_dir(key)
        folder.mkdir(parents=True)
        (folder / contract.EVENTS_FILE).write_text("".join(line + "\n" for line in events.get(key, [])))
        if key in results:
            (folder / contract.RESULT_FILE).write_text(json.dumps(results[key]))
    run.path.mkdir(parents=True, exist_ok=True)
    with open(run.path / "stats.csv", "w") as f:
        f.write(",".join(STATS_FIELDS) + "\n")
        f.writelines(",".join(str(row[k]) for k in STATS_FIELDS) + "\n" for row in rows)
    run.write_record(RunInfo(run_id="r", state=state, spec=spec, started=99.0, wall_seconds=40.0, error=error,
                             workers=recorded or [], restarts=restarts or []))
    return run


W0, W1 = ("worker", 0), ("worker", 1)


def two_workers(tmp_path: Path, **kwargs) -> RunDir:
    """Two workers that differ in every figure: worker 0's curves, worker 1 the slower."""
    spec = make_spec(workers=2, dataset="synthetic", samples=6000, epochs=2, run_id="r")
    events = {W0: epochs(0, (0.9, 0.4), (10.123456, 12.0), val_loss=(0.5, 0.25), val_accuracy=(0.75, 0.875),
                         compute_seconds=(7.123456, 8.5), allreduce_wait_seconds=(2.5, 3.5)),
              W1: epochs(1, (0.95, 0.45), (20.0, 22.0), val_loss=(0.6, 0.4), val_accuracy=(0.5, 0.625),
                         compute_seconds=(1.0, 1.0), allreduce_wait_seconds=(1.0, 1.0))}
    results = {W0: result(0, 30.0, 0.8, [1920, 1920]), W1: result(1, 32.0, 0.81, [1600, 1601])}
    rows = stats("worker", 0, (50.0, 52.0, 54.0), 2_000_000, 4_000_000) + \
        stats("worker", 1, (70.0, 72.0, 74.5), 3_000_000, 5_000_000)
    recorded = [{"worker": 0, "exit_code": 0}, {"role": "worker", "worker": 1, "exit_code": 3}]
    return write_run(tmp_path, spec, {**events, **kwargs.pop("events", {})}, kwargs.pop("results", results), rows,
                     recorded=kwargs.pop("recorded", recorded), **kwargs)


def test_a_runs_figures_are_its_slowest_worker_its_first_workers_curves_and_every_containers_cost(tmp_path):
    run = two_workers(tmp_path, restarts=[{"at": 120.0, "reason": "worker-1 died"}])
    record = json.loads((run.path / RUN_FILE).read_text())
    (run.path / RUN_FILE).write_text(json.dumps({**record, "workers": ["hand-edited", *record["workers"]]}))
    got = summarize(run)  # a recorded worker that is not a mapping is passed over
    s = got.summary
    assert (s["schema"], s["run_id"], s["state"], s["failed"], s["partial"], s["error"]) == \
        (1, "r", "succeeded", False, False, None)
    assert (s["started"], s["wall_seconds"], s["spec"]["workers"], s["restarts"]) == \
        (99.0, 40.0, 2, [{"at": 120.0, "reason": "worker-1 died"}])
    assert (s["train_seconds"], s["test_accuracy"], s["epochs_completed"]) == (32.0, 0.8, 2)  # slowest; worker 0's
    # Worker 0's curves and split: its epochs' mean time, its last validation, its losses, its sums (to 4 places).
    assert (s["epoch_seconds"], s["val_loss"], s["val_accuracy"], s["loss_curve"]) == \
        (11.0617, 0.25, 0.875, [0.9, 0.4])
    assert (s["compute_seconds"], s["allreduce_wait_seconds"]) == (15.6235, 6.0)
    # Each worker's own samples over its own time, summed, to 2 places: 3840 / 30 + 3201 / 32 = 228.03125.
    assert s["samples_per_second"] == 228.03
    # Every container's mean CPU (52 and 72.17), averaged to two places; every byte in and out.
    assert (s["cpu_mean_percent"], s["net_bytes"], s["stats_samples"]) == (62.09, 14_000_000, 6)
    assert s["serving"] == [] and s["warnings"] == []
    assert s["workers"] == [
        {"role": "worker", "worker": 0, "exit_code": 0, "invalid": None, "train_seconds": 30.0, "test_accuracy": 0.8,
         "samples_per_epoch": [1920, 1920], "steps_per_epoch": 40, "replicas": 2, "records_dropped": 0,
         "records_unread_bytes": 0, "stats_samples": 3, "cpu_mean_percent": 52.0, "cpu_max_percent": 54.0,
         "mem_max_bytes": 10**8 + 2, "net_rx_bytes": 2_000_000, "net_tx_bytes": 4_000_000, "blk_read_bytes": 14,
         "blk_write_bytes": 18},
        {"role": "worker", "worker": 1, "exit_code": 3, "invalid": None, "train_seconds": 32.0, "test_accuracy": 0.81,
         "samples_per_epoch": [1600, 1601], "steps_per_epoch": 40, "replicas": 2, "records_dropped": 0,
         "records_unread_bytes": 0, "stats_samples": 3, "cpu_mean_percent": 72.17, "cpu_max_percent": 74.5,
         "mem_max_bytes": 10**8 + 2, "net_rx_bytes": 3_000_000, "net_tx_bytes": 5_000_000, "blk_read_bytes": 14,
         "blk_write_bytes": 18}]
    assert [(e["worker"], e["epoch"], e["loss"]) for e in got.epochs] == [(0, 1, 0.9), (0, 2, 0.4), (1, 1, 0.95),
                                                                         (1, 2, 0.45)]
    assert len(got.stats) == 6 and got.keys == [W0, W1] and set(got.workers) == {W0, W1}


def test_an_invalid_worker_leaves_the_runs_figures_to_the_others(tmp_path):
    bad = epochs(0, (0.9,)) + ['{"v": 2, "event": ']  # worker 0's records fail: worker 1's are the run's
    got = summarize(two_workers(tmp_path, events={W0: bad}))
    s = got.summary
    assert s["partial"] and not s["failed"]
    assert (s["train_seconds"], s["test_accuracy"], s["epochs_completed"]) == (32.0, 0.81, 2)
    assert (s["epoch_seconds"], s["val_loss"], s["val_accuracy"], s["loss_curve"]) == (21.0, 0.4, 0.625, [0.95, 0.45])
    assert (s["compute_seconds"], s["allreduce_wait_seconds"]) == (2.0, 2.0)
    assert s["samples_per_second"] is None  # one worker's rate is not the run's
    assert (s["cpu_mean_percent"], s["net_bytes"]) == (62.09, 14_000_000)  # an invalid worker still cost its CPU
    [warning] = s["warnings"]
    assert warning.startswith("worker-0: its figures are invalid: ") and s["workers"][0]["invalid"] in warning
    assert s["workers"][0]["train_seconds"] is None and s["workers"][0]["samples_per_epoch"] == []
    assert {e["worker"] for e in got.epochs} == {1}


def test_a_run_whose_workers_are_all_invalid_has_no_figures_but_its_cost(tmp_path):
    broken = ['{"v": 2, "event": ']
    s = summarize(two_workers(tmp_path, events={W0: broken, W1: broken})).summary
    assert s["partial"] and len(s["warnings"]) == 2
    assert (s["train_seconds"], s["test_accuracy"], s["epochs_completed"], s["epoch_seconds"]) == (None, None, 0, None)
    assert (s["val_loss"], s["val_accuracy"], s["loss_curve"], s["samples_per_second"]) == (None, None, [], None)
    assert (s["compute_seconds"], s["allreduce_wait_seconds"]) == (None, None)
    assert s["cpu_mean_percent"] == 62.09


def test_a_split_or_an_epoch_time_a_trainer_did_not_measure_is_unknown_not_zero(tmp_path):
    events = {W0: epochs(0, (0.9, 0.4), compute_seconds=(7.5, None), allreduce_wait_seconds=(2.5, 3.5)),
              W1: epochs(1, (0.9, 0.4))}
    s = summarize(two_workers(tmp_path, events=events)).summary
    assert (s["epoch_seconds"], s["compute_seconds"], s["allreduce_wait_seconds"]) == (None, None, 6.0)
    assert (s["val_loss"], s["val_accuracy"]) == (None, None)


def test_a_failed_run_says_its_error_and_what_its_workers_did(tmp_path):
    s = summarize(two_workers(tmp_path, results={}, state=RunState.FAILED, error="worker-1 was killed")).summary
    assert (s["state"], s["failed"], s["error"], s["partial"]) == ("failed", True, "worker-1 was killed", False)
    assert (s["train_seconds"], s["test_accuracy"], s["samples_per_second"]) == (None, None, None)
    assert s["epochs_completed"] == 2 and s["loss_curve"] == [0.9, 0.4]  # from the events
    assert [w["samples_per_epoch"] for w in s["workers"]] == [[1900, 1900], [1900, 1900]]
    assert [(w["steps_per_epoch"], w["replicas"]) for w in s["workers"]] == [(None, None), (None, None)]


def test_records_past_the_jobs_epochs_and_a_capped_events_file_are_each_said_in_one_line(tmp_path):
    events = {W1: epochs(1, (0.95, 0.45, 0.3, 0.2))}  # 4 epochs of a 2-epoch job
    capped = "events.jsonl stopped at its limit\nof 16 MiB" + " and more" * 60
    recorded = [{"worker": 0, "exit_code": 0, "records_capped": capped},
                {"worker": 1, "exit_code": 0, "records_capped": 7}]  # not a text: not said
    s = summarize(two_workers(tmp_path, events=events, recorded=recorded)).summary
    long, dropped = s["warnings"]
    assert long.startswith("worker-0: events.jsonl stopped at its limit\\nof 16 MiB and more")
    assert len(long) == 400 and long.endswith("…")  # one line of 400 characters at most
    assert dropped == "worker-1: 2 record(s) past the job's 2 epoch(s) dropped"
    assert [w["records_dropped"] for w in s["workers"]] == [0, 2]


def test_the_replicas_that_serve_count_in_the_cost_and_not_in_the_figures(tmp_path):
    spec = make_spec(workers=2, strategy="ps", dataset="synthetic", samples=6000, epochs=2, run_id="r")
    keys = spec.replica_keys()
    chief = next(k for k in keys if k[0] == "chief")
    serving = [k for k in keys if k != chief]
    rows = stats("chief", 0, (100.0,), 1000, 2000) + stats(serving[0][0], serving[0][1], (10.0, 30.0), 10, 20)
    run = write_run(tmp_path, spec, {chief: epochs(0, (0.7, 0.6), (5.0, 6.0))},
                    {chief: {**result(0, 12.0, 0.9, [6000, 6000]), "replicas": 1}}, rows,
                    recorded=[{"role": "chief", "worker": 0, "exit_code": 0}])
    s = summarize(run).summary
    assert [(w["role"], w["worker"], w["exit_code"]) for w in s["workers"]] == [(*chief, 0)]
    assert [(w["role"], w["worker"], w["stats_samples"], w["cpu_mean_percent"]) for w in s["serving"]] == \
        [(k[0], k[1], 2 if k == serving[0] else 0, 20.0 if k == serving[0] else None) for k in serving]
    assert (s["train_seconds"], s["samples_per_second"], s["epoch_seconds"]) == (12.0, 1000.0, 5.5)
    assert (s["cpu_mean_percent"], s["net_bytes"], s["stats_samples"]) == (60.0, 3030, 3)  # chief's 100, a server's 20


def test_a_run_record_without_a_spec_is_summarized_as_nothing_run(tmp_path):
    s = summarize(write_run(tmp_path, None, {}, {}, [], state=RunState.FAILED, error="no spec")).summary
    assert (s["spec"], s["workers"], s["serving"], s["epochs_completed"], s["loss_curve"]) == ({}, [], [], 0, [])
    assert (s["cpu_mean_percent"], s["net_bytes"], s["samples_per_second"]) == (None, None, None)


def test_a_folder_without_a_run_record_is_refused_by_name(tmp_path):
    with pytest.raises(RunNotFound, match=r"nothing holds no run \(no run record\)$"):
        summarize(RunDir(tmp_path / "nothing"))


def test_the_validation_figures_are_those_after_the_last_epoch(tmp_path):
    spec = make_spec(workers=1, dataset="synthetic", samples=6000, epochs=3, run_id="r")
    events = {("worker", 0): epochs(0, (0.9, 0.5, 0.4), val_loss=(0.8, 0.6, 0.5), val_accuracy=(0.5, 0.625, 0.75))}
    s = summarize(write_run(tmp_path, spec, events, {}, [])).summary
    assert (s["val_loss"], s["val_accuracy"], s["loss_curve"]) == (0.5, 0.75, [0.9, 0.5, 0.4])
