"""collect's arithmetic, exactly: each container's figures from its stats samples, a worker's own rate, and the line
that says what was left of a replica's records. No engine, no run folder.

tests/test_collect.py checks whole runs; these pin the figures to the digit, which mutation testing
(benchmarks/mutation.py) found it left open."""
from __future__ import annotations

from types import SimpleNamespace

from orchestrator.analysis.collect import _container_figures, _dropped_line, _rate

NONE = {"stats_samples": 0, "cpu_mean_percent": None, "cpu_max_percent": None, "mem_max_bytes": None,
        "net_rx_bytes": None, "net_tx_bytes": None, "blk_read_bytes": None, "blk_write_bytes": None}


def sample(cpu: float, n: int) -> dict:
    return {"cpu_percent": cpu, "mem_used_bytes": 100 * n, "net_rx_bytes": 10 * n, "net_tx_bytes": 20 * n,
            "blk_read_bytes": 30 * n, "blk_write_bytes": 40 * n}


def test_a_container_without_samples_has_no_figures():
    assert _container_figures([]) == NONE


def test_a_containers_figures_are_its_mean_and_peak_cpu_to_two_places_and_its_counters_last_values():
    rows = [sample(12.3456, 1), sample(14.5678, 3), sample(10.0, 2)]
    assert _container_figures(rows) == {
        "stats_samples": 3, "cpu_mean_percent": 12.30, "cpu_max_percent": 14.57, "mem_max_bytes": 300,
        "net_rx_bytes": 30, "net_tx_bytes": 60, "blk_read_bytes": 90, "blk_write_bytes": 120}


def test_a_workers_rate_is_its_own_samples_over_its_own_train_time():
    assert _rate({"samples_per_epoch": [100, 300], "train_seconds": 8.0}) == 50.0
    assert _rate({"samples_per_epoch": [100, None], "train_seconds": 8.0}) is None
    assert _rate({"samples_per_epoch": [], "train_seconds": 8.0}) is None
    assert _rate({"samples_per_epoch": [100], "train_seconds": 0}) is None
    assert _rate({"samples_per_epoch": [100], "train_seconds": None}) is None


def test_what_was_left_of_a_replicas_records_is_said_in_one_line():
    got = SimpleNamespace(key=("worker", 2), dropped=1234, capped=None)
    assert _dropped_line(got, 3, None) == "worker-2: 1,234 record(s) past the job's 3 epoch(s) dropped"
    assert _dropped_line(got, 3, "events capped at 8 MiB") == \
        "worker-2: 1,234 record(s) past the job's 3 epoch(s) dropped; events capped at 8 MiB"
    assert _dropped_line(SimpleNamespace(key=("ps", 0), dropped=0, capped="capped"), 3, "marked") == "ps-0: capped"
    assert _dropped_line(SimpleNamespace(key=("ps", 0), dropped=0, capped=None), 3, None) is None


def test_a_comparison_row_holds_each_runs_own_figures_beside_its_scaling():
    from orchestrator.analysis.collect import compare

    one = {"run_id": "a", "state": "succeeded", "spec": {"workers": 1, "dataset": "mnist", "samples": 500},
           "train_seconds": 10.0, "test_accuracy": 0.9, "cpu_mean_percent": 50.0, "net_bytes": 3_000_000}
    two = {**one, "run_id": "b", "state": "failed", "partial": True, "spec": {**one["spec"], "workers": 2},
           "train_seconds": 8.0, "net_bytes": None}
    assert compare([one, two]) == [
        {"run_id": "a", "state": "succeeded", "partial": False, "workers": 1, "samples": 500, "test_accuracy": 0.9,
         "train_seconds": 10.0, "time_ratio": 1.0, "speedup": 1.0, "efficiency": 1.0, "cpu_mean_percent": 50.0,
         "net_mb": 3.0},
        {"run_id": "b", "state": "failed", "partial": True, "workers": 2, "samples": 500, "test_accuracy": 0.9,
         "train_seconds": 8.0, "time_ratio": 0.8, "speedup": 1.25, "efficiency": 0.625, "cpu_mean_percent": 50.0,
         "net_mb": None}]
    assert compare([{"run_id": "c", "state": "succeeded"}])[0]["workers"] == 0  # a summary naming no spec


class Record:
    """An epoch record as rundir gives it: model_dump() of what the container wrote."""

    def __init__(self, **fields) -> None:
        self.fields = fields

    def model_dump(self) -> dict:
        return dict(self.fields)


def test_a_replicas_epoch_rows_carry_its_own_index_whatever_its_records_claim():
    from orchestrator.analysis.collect import EPOCH_FIELDS, _epochs_of, _samples

    got = SimpleNamespace(key=("worker", 2), result=None,
                          epochs={2: Record(worker=7, epoch=2, loss=0.5, samples=64), 1: Record(worker=7, epoch=1,
                                                                                                 loss=0.9, samples=32)})
    rows = _epochs_of(got)
    assert [(r["worker"], r["epoch"], r["loss"]) for r in rows] == [(2, 1, 0.9), (2, 2, 0.5)]
    assert list(rows[0]) == EPOCH_FIELDS and rows[0]["accuracy"] is None
    assert _samples(got, rows) == [32, 64]
    from_result = SimpleNamespace(key=("worker", 0), epochs={},
                                  result=SimpleNamespace(epochs=[{"epoch": 1, "loss": 0.3}], samples_per_epoch=[96]))
    assert [(r["worker"], r["epoch"], r["loss"]) for r in _epochs_of(from_result)] == [(0, 1, 0.3)]
    assert _samples(from_result, []) == [96]
