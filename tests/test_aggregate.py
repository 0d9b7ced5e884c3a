"""An experiment's rows (metrics.aggregate), to the digit: every figure a report reads, from cells written here.

Each repeat's figures are simple functions of its train time, in binary fractions, so a row is compared whole, exactly;
the repeats are not in order, so a median that took the first, the smallest or the largest repeat shows. Pinned where
mutation testing (benchmarks/mutation.py) found tests/test_metrics.py left aggregate open. No engine, no files."""
from __future__ import annotations

import os

import pytest

from orchestrator.analysis import metrics


def cell(workers: int, train: float, batch: int = 64, **params) -> dict:
    """A succeeded cell of ``workers`` workers taking ``train`` s over 2 epochs of 8 steps, on a machine of 2 cores."""
    summary = {
        "test_accuracy": 1 - train / 16, "train_seconds": train, "wall_seconds": train + 8,
        "cpu_mean_percent": 50 * train, "epoch_seconds": train / 2, "val_loss": train / 4,
        "val_accuracy": 1 - train / 32,
        "net_bytes": 1000 * train * workers, "samples_per_second": 100 * train, "compute_seconds": train * 0.75,
        "allreduce_wait_seconds": train * 0.25, "loss_curve": [train, train / 2],
        "spec": {"epochs": 2, "workers": workers, "global_batch": batch}, "workers": [{"steps_per_epoch": 8}]}
    floor = {"floor": train / 2 + 0.5, "compute_floor": train / 4 + 0.5, "transport_floor": train / 4}
    point = {"workers": workers, **params}
    return {"params": point, "fields": point, "state": "succeeded", "summary": summary, "floor": floor,
            "machine": {"id": "m", "cores": 2}}


def failed(workers: int, batch: int) -> dict:
    point = {"workers": workers}
    return {"params": point, "fields": point, "state": "failed",
            "summary": {"spec": {"epochs": 2, "workers": workers, "global_batch": batch}}}


def spread(values):  # (median, min, max) of three repeats written (min, max, median)
    return values[2], values[0], values[1]


def expected(workers: int, trains: tuple[float, float, float], t_1: float, base_cpu: float, base_step: float,
             batch: int = 64) -> dict:
    """The row of three repeats taking ``trains`` (min, max, median) s, against a median one-worker time ``t_1``."""
    def each(f):
        return spread([f(t) for t in trains])

    train = spread(trains)
    step = train[0] / 16
    sync = max(step - base_step, 0.0) if workers > 1 and batch == 64 else None
    return {
        "params": {"workers": workers}, "runs": 3, "failed": 0,
        "test_accuracy": (1 - train[0] / 16, 1 - train[2] / 16, 1 - train[1] / 16),
        "train_seconds": train, "wall_seconds": each(lambda t: t + 8), "cpu_mean_percent": each(lambda t: 50 * t),
        "net_bytes_per_worker": each(lambda t: 1000 * t), "step_seconds": each(lambda t: t / 16),
        "epoch_seconds": each(lambda t: t / 2), "val_loss": each(lambda t: t / 4),
        "val_accuracy": (1 - train[0] / 32, 1 - train[2] / 32, 1 - train[1] / 32),
        "samples_per_second": each(lambda t: 100 * t), "compute_seconds": each(lambda t: t * 0.75),
        "allreduce_wait_seconds": each(lambda t: t * 0.25),
        "loss_curve": [trains[0], trains[0] / 2],  # the first repeat's, in the cells' order
        "global_batch": batch,
        "floor_seconds": each(lambda t: t / 2 + 0.5), "compute_floor": each(lambda t: t / 4 + 0.5),
        "transport_floor": each(lambda t: t / 4), "floor_note": None,
        "n": workers, "base_seconds": t_1,
        "time_ratio": train[0] / t_1, "speedup": t_1 / train[0], "efficiency": t_1 / train[0] / workers,
        "speedup_range": (t_1 / train[0], t_1 / train[2], t_1 / train[1]),
        "efficiency_range": (t_1 / train[0] / workers, t_1 / train[2] / workers, t_1 / train[1] / workers),
        "cpu_bound": round(min(float(workers), 2 * 100.0 / base_cpu), 3),
        "vs_floor": train[0] / (train[0] / 2 + 0.5), "floor_bound": t_1 / (train[0] / 2 + 0.5),
        "same_work": batch == 64, "sync_seconds_per_step": sync,
        "sync_share": sync / step if sync is not None else None,
    }


@pytest.fixture(autouse=True)
def _eight_cores_here(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)  # the cells' machine had 2: its cores, not this one's, bound them


def test_each_row_is_the_median_and_range_of_its_repeats_against_the_one_worker_median():
    # The cells in no order: two failed 16-worker cells first, then the repeats (min, max, median) of each point.
    cells = {"x16a": failed(16, 512), "x16b": failed(16, 256),
             "w2a": cell(2, 4.0), "w2b": cell(2, 8.0), "w2c": cell(2, 6.0),
             "w4": cell(4, 2.0, batch=256),
             "w1a": cell(1, 2.0), "w1b": cell(1, 4.0), "w1c": cell(1, 3.0)}
    rows = metrics.aggregate(cells)
    assert [r["params"]["workers"] for r in rows] == [1, 2, 4, 16]  # by number, not by text
    one, two, four, sixteen = rows
    # One worker: 3 s (2 to 4) is its own baseline; 150 % of a core on 2 cores bounds any N at 1.333.
    assert one == expected(1, (2.0, 4.0, 3.0), 3.0, 150.0, 3.0 / 16)
    # Two workers at 6 s (4 to 8) against 3 s: speedup 0.5 (0.375 to 0.75); a step of 0.375 s against 0.1875 s.
    assert two == expected(2, (4.0, 8.0, 6.0), 3.0, 150.0, 3.0 / 16)
    assert (two["speedup"], two["speedup_range"], two["cpu_bound"]) == (0.5, (0.5, 0.375, 0.75), 1.333)
    assert (two["sync_seconds_per_step"], two["sync_share"]) == (0.1875, 0.5)
    # Four workers with a batch each: one repeat; a bigger step is no synchronisation.
    assert (four["runs"], four["train_seconds"], four["speedup"], four["global_batch"]) == \
        (1, (2.0, 2.0, 2.0), 1.5, 256)
    assert (four["same_work"], four["sync_seconds_per_step"], four["sync_share"]) == (False, None, None)
    assert four["step_seconds"] == (0.125, 0.125, 0.125) and four["cpu_bound"] == 1.333
    # Sixteen: both cells failed; the point still says what it asked for (the first cell's batch), its baseline and
    # the bound of the machine, and has no figures of its own.
    assert (sixteen["runs"], sixteen["failed"], sixteen["global_batch"]) == (2, 2, 512)
    assert (sixteen["n"], sixteen["base_seconds"], sixteen["cpu_bound"], sixteen["same_work"]) == \
        (16, 3.0, 1.333, False)
    assert all(sixteen[k] is None for k in ("train_seconds", "test_accuracy", "speedup", "floor_bound", "sync_share",
                                            "speedup_range", "floor_seconds", "floor_note"))
    assert sixteen["loss_curve"] == []


def setup(params: dict, train: float) -> dict:
    """A cell of the setup ``params`` (strategy, workers, replicas: as many as it names), as cell() writes one."""
    return {**cell(params.get("workers", 1), train), "params": params, "fields": params}


def test_a_named_baseline_puts_every_setup_against_its_median_and_n_is_workers_times_replicas():
    cells = {"m": setup({"strategy": "mirrored", "replicas": 2}, 12.0),
             "s1": setup({"strategy": "single"}, 2.0), "s2": setup({"strategy": "single"}, 4.0),
             "s3": setup({"strategy": "single"}, 3.0),
             "w": setup({"strategy": "mwms", "workers": 2}, 1.5),
             "h": setup({"strategy": "hybrid", "workers": 2, "replicas": 2}, 0.75)}
    rows = metrics.aggregate(cells, baseline={"strategy": "single"})
    assert [r["params"]["strategy"] for r in rows] == ["mirrored", "single", "mwms", "hybrid"]  # the file's order
    got = [(r["n"], r["base_seconds"], r["time_ratio"], r["speedup"], r["efficiency"], r["cpu_bound"]) for r in rows]
    assert got == [(2, 3.0, 4.0, 0.25, 0.125, 1.333), (1, 3.0, 1.0, 1.0, 1.0, 1.0), (2, 3.0, 0.5, 2.0, 1.0, 1.333),
                   (4, 3.0, 0.25, 4.0, 1.0, 1.333)]
    assert rows[3]["speedup_range"] == (4.0, 4.0, 4.0) and rows[1]["speedup_range"] == (1.0, 0.75, 1.5)


def test_what_a_cell_leaves_out_is_read_from_its_spec_or_taken_as_one():
    spec_only = cell(4, 2.0)
    spec_only["fields"] = {}  # its workers only in the spec: the network per worker is over those 4
    neither = cell(1, 2.0)
    neither["fields"], neither["summary"]["spec"] = {}, {"global_batch": 64}  # no workers, no epochs: one of each
    rows = {r["params"]["workers"]: r for r in metrics.aggregate({"a": spec_only, "b": neither})}
    assert rows[4]["net_bytes_per_worker"] == (2000.0, 2000.0, 2000.0)
    assert rows[1]["net_bytes_per_worker"] == (2000.0, 2000.0, 2000.0)
    assert rows[1]["step_seconds"] == (0.25, 0.25, 0.25)  # 2 s over 1 epoch of 8 steps
    assert rows[4]["step_seconds"] == (0.125, 0.125, 0.125)  # 2 s over 2 epochs of 8 steps


def test_a_point_keeps_its_first_floor_note_and_its_first_loss_curve():
    def with_floor(train, floor, curve=True):
        c = cell(2, train)
        c["floor"] = floor
        if not curve:
            del c["summary"]["loss_curve"]
        return c

    cells = {"a": with_floor(2.0, {"error": "its solo rank failed"}, curve=False),
             "b": with_floor(3.0, {"error": "another failure"}), "c": with_floor(4.0, None),
             "d": {**with_floor(2.0, {"none": "one container is its own floor"}), "params": {"workers": 2, "x": 1}},
             "e": {**with_floor(2.0, {}), "params": {"workers": 2, "x": 2}},
             "f": {**with_floor(2.0, {"floor": 1.0, "compute_floor": float("nan"), "transport_floor": 0.1}),
                   "params": {"workers": 2, "x": 3}}}  # edited by hand: no figure
    rows = metrics.aggregate(cells)
    assert [r["floor_note"] for r in rows] == ["its solo rank failed", "one container is its own floor",
                                               "not measured yet", "not measured yet"]
    assert rows[0]["loss_curve"] == [3.0, 1.5]  # the first repeat that drew one
    assert all(r["floor_seconds"] is None and r["vs_floor"] is None for r in rows)


def test_without_the_cells_machine_the_cpu_bound_is_on_this_ones_cores():
    cells = {f"w{n}": cell(n, 3.0) for n in (1, 2)}
    for c in cells.values():
        del c["machine"]
    assert [r["cpu_bound"] for r in metrics.aggregate(cells)] == [1.0, 2.0]  # 8 cores here: 150 % bounds nothing


def test_a_cell_whose_summary_lost_its_spec_takes_its_workers_from_its_own_fields():
    lost = cell(3, 2.0)
    lost["summary"]["spec"] = {}  # the cell's fields still say 3 workers: its network is over those 3
    assert metrics.aggregate({"a": lost})[0]["net_bytes_per_worker"] == (2000.0, 2000.0, 2000.0)


def test_grid_points_are_in_order_of_each_parameter_right_aligned_in_twelve_characters():
    """Numbers right-aligned in 12 characters order by value; texts as long or longer are in alphabetical order."""
    cells = {f"{model}-{batch}": cell(2, 2.0, model=model, batch_size=batch)
             for model in ("resnet-small", "mobilenet-big") for batch in (100000, 64, 512)}
    rows = metrics.aggregate(cells)
    assert [(r["params"]["batch_size"], r["params"]["model"]) for r in rows] == [
        (64, "mobilenet-big"), (64, "resnet-small"), (512, "mobilenet-big"), (512, "resnet-small"),
        (100000, "mobilenet-big"), (100000, "resnet-small")]
