"""Scaling arithmetic (pure): ratios, baselines, medians over repeats, synchronisation per step."""
import os

import pytest

from orchestrator.analysis import metrics


def test_ratio_speedup_and_efficiency():
    assert metrics.time_ratio(30.0, 10.0) == pytest.approx(3.0)
    assert metrics.speedup(8.0, 10.0) == pytest.approx(1.25)
    assert metrics.efficiency(8.0, 10.0, 2) == pytest.approx(0.625)
    same = metrics.scaling(10.0, 10.0, 1)
    assert (same.time_ratio, same.speedup, same.efficiency) == (1.0, 1.0, 1.0)
    assert metrics.scaling(40.0, 10.0, 4).to_dict() == pytest.approx(
        {"time_ratio": 4.0, "speedup": 0.25, "efficiency": 0.0625})


@pytest.mark.parametrize("t_n, t_1, workers", [(None, 10.0, 2), (10.0, None, 2), (0.0, 10.0, 2), (10.0, 0.0, 2)])
def test_missing_or_zero_times_give_none(t_n, t_1, workers):
    assert metrics.scaling(t_n, t_1, workers) == metrics.Scaling(None, None, None)


def test_speedup_range_is_each_repeat_against_the_median_one_worker_time():
    speedup, efficiency = metrics.speedup_range((5.0, 4.0, 8.0), 10.0, 2)
    assert speedup == pytest.approx((2.0, 1.25, 2.5)) and efficiency == pytest.approx((1.0, 0.625, 1.25))
    assert metrics.speedup_range(None, 10.0, 2) == (None, None) == metrics.speedup_range((5.0, 4.0, 8.0), None, 2)
    assert metrics.speedup_range((5.0, 0.0, 8.0), 10.0, 2) == (None, None)


def test_efficiency_needs_workers():
    assert metrics.efficiency(5.0, 10.0, 0) is None and metrics.speedup(5.0, 10.0) == 2.0


def _summary(run_id, workers, seconds, failed=False, samples=60000, epochs=5, batch=96):
    return {"run_id": run_id, "failed": failed, "train_seconds": seconds,
            "spec": {"workers": workers, "dataset": "mnist", "samples": samples, "epochs": epochs,
                     "global_batch": batch, "framework": {"name": "tensorflow", "collective": "ring"}}}


def test_run_baseline_matches_data_samples_epochs_and_batch():
    one, other_batch = _summary("one", 1, 10.0), _summary("b", 1, 9.0, batch=192)
    index = metrics.run_baselines([one, other_batch, _summary("three", 3, 30.0)])
    assert metrics.run_baseline(_summary("x", 3, 30.0), index) is one
    assert metrics.run_baseline(_summary("y", 2, 5.0, batch=192), index) is other_batch
    assert metrics.run_baseline(_summary("z", 3, 5.0, samples=5000), index) is None
    assert metrics.run_baseline(_summary("w", 3, 5.0, epochs=2), index) is None


def test_failed_or_untimed_runs_are_no_baseline():
    index = metrics.run_baselines([_summary("f", 1, 10.0, failed=True), _summary("u", 1, None)])
    assert index == {} and metrics.run_baseline(_summary("x", 3, 30.0), index) is None


def test_no_baseline_at_all():
    assert metrics.run_baselines([]) == {}
    assert metrics.point_baseline({"params": {"workers": 2}}, metrics.point_baselines([])) is None


def test_grid_point_baseline_matches_the_other_params():
    rows = [{"params": {"workers": 1, "samples": 5000}, "train_seconds": (2.0, 2.0, 2.0)},
            {"params": {"workers": 1, "samples": 60000}, "train_seconds": (20.0, 20.0, 20.0)},
            {"params": {"workers": 1, "samples": 9000}, "train_seconds": None}]
    index = metrics.point_baselines(rows)
    assert metrics.point_baseline({"params": {"samples": 60000, "workers": 3}}, index) is rows[1]
    assert metrics.point_baseline({"params": {"workers": 3, "samples": 9000}}, index) is None  # no time
    # A grid without workers: every point is its own (1-worker) baseline.
    alone = {"params": {"samples": 5000}, "train_seconds": (1.0, 1.0, 1.0)}
    assert metrics.point_baseline(alone, metrics.point_baselines([alone])) is alone


def test_median_and_range():
    assert metrics.median_range([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert metrics.median_range([4.0, 1.0]) == (2.5, 1.0, 4.0)
    assert metrics.median_range([]) is None


def test_step_seconds():
    assert metrics.step_seconds(30.0, 5, 100) == pytest.approx(0.06)
    assert metrics.step_seconds(None, 5, 100) is None and metrics.step_seconds(30.0, 5, None) is None


def test_sync_cost_per_step():
    cost = metrics.sync_cost(0.060, 0.006, 3)
    assert cost.seconds_per_step == pytest.approx(0.054) and cost.share == pytest.approx(0.9)
    faster = metrics.sync_cost(0.005, 0.006, 2)  # faster than one worker: no synchronisation cost to show
    assert faster.seconds_per_step == 0.0 and faster.share == 0.0
    assert metrics.sync_cost(0.006, 0.006, 1) is None
    assert metrics.sync_cost(None, 0.006, 3) is None and metrics.sync_cost(0.06, None, 3) is None


def _cell(workers, samples, seconds, state="succeeded", acc=0.9):
    summary = {"test_accuracy": acc, "train_seconds": seconds, "wall_seconds": seconds + 10, "cpu_mean_percent": 80.0,
               "net_bytes": 3_000_000 * workers, "spec": {"epochs": 5, "workers": workers},
               "workers": [{"steps_per_epoch": 100}]}
    return {"params": {"workers": workers, "samples": samples}, "fields": {"workers": workers, "samples": samples},
            "state": state, "summary": summary if state == "succeeded" else {}}


def test_aggregate_medians_ratios_and_sync_share():
    cells = {"a": _cell(1, 5000, 2.0), "b": _cell(1, 5000, 4.0), "c": _cell(1, 5000, 3.0),
             "d": _cell(3, 5000, 30.0), "e": _cell(3, 5000, 0, state="failed")}
    rows = {r["params"]["workers"]: r for r in metrics.aggregate(cells)}
    assert rows[1]["train_seconds"] == (3.0, 2.0, 4.0) and rows[1]["time_ratio"] == 1.0
    assert rows[1]["sync_seconds_per_step"] is None
    assert rows[3]["time_ratio"] == pytest.approx(10.0) and rows[3]["efficiency"] == pytest.approx(1 / 30)
    assert rows[3]["runs"] == 2 and rows[3]["failed"] == 1
    # 30 s / 500 steps = 60 ms per step against 6 ms: 54 ms, 90 % of the step, is synchronisation.
    assert rows[3]["sync_seconds_per_step"] == pytest.approx(0.054) and rows[3]["sync_share"] == pytest.approx(0.9)
    assert rows[3]["net_bytes_per_worker"][0] == 3_000_000


def test_aggregate_without_a_baseline_point():
    rows = metrics.aggregate({"a": _cell(2, 5000, 4.0), "b": _cell(3, 5000, 0, state="failed")})
    assert [r["params"]["workers"] for r in rows] == [2, 3]
    assert all(r["time_ratio"] is None and r["speedup"] is None and r["sync_share"] is None for r in rows)
    assert rows[1]["train_seconds"] is None and rows[1]["failed"] == 1


def test_scaling_along_replicas_takes_one_replica_as_the_baseline():
    from orchestrator.analysis.metrics import aggregate

    def cell(replicas, train):
        return {"params": {"replicas": replicas}, "fields": {"replicas": replicas}, "state": "succeeded",
                "summary": {"train_seconds": train, "spec": {"workers": 1, "epochs": 1},
                            "workers": [{"steps_per_epoch": 10}]}}

    cells = {f"r{n}": cell(n, t) for n, t in ((1, 2.0), (2, 4.0), (4, 8.0))}
    rows = {r["params"]["replicas"]: r for r in aggregate(cells, "replicas")}
    assert [rows[n]["time_ratio"] for n in (1, 2, 4)] == [1.0, 2.0, 4.0]
    assert rows[4]["efficiency"] == 0.25 / 4
    # Along workers the same rows have no baseline of their own to compare with: each is 1 worker.
    assert {r["time_ratio"] for r in aggregate(cells)} == {1.0}


def test_a_named_baseline_compares_every_setup_with_one_cell_and_keeps_their_order():
    from orchestrator.analysis.metrics import aggregate

    def cell(params, train, epoch=None, val=None):
        return {"params": params, "fields": params, "state": "succeeded",
                "summary": {"train_seconds": train, "spec": {"workers": params.get("workers", 1), "epochs": 1},
                            "workers": [{"steps_per_epoch": 10}], "epoch_seconds": epoch, "val_loss": val}}

    cells = {"m": cell({"strategy": "mirrored", "replicas": 2}, 4.0), "s": cell({"strategy": "single"}, 2.0, 2.0, 0.5),
             "w": cell({"strategy": "mwms", "workers": 2}, 3.0)}
    rows = aggregate(cells, baseline={"strategy": "single"})
    assert [r["params"]["strategy"] for r in rows] == ["mirrored", "single", "mwms"]
    by = {r["params"]["strategy"]: r for r in rows}
    assert (by["single"]["time_ratio"], by["mirrored"]["time_ratio"], by["mwms"]["time_ratio"]) == (1.0, 2.0, 1.5)
    assert by["mirrored"]["efficiency"] == pytest.approx(0.25)  # N = 1 worker x 2 replicas
    assert by["single"]["epoch_seconds"] == (2.0, 2.0, 2.0) and by["single"]["val_loss"][0] == 0.5
    assert all(r["time_ratio"] is None for r in aggregate(cells, baseline={"strategy": "ps"}))


def _scaling_cell(setup, workers, train, repeat=0):
    summary = {"test_accuracy": 0.9, "train_seconds": train, "wall_seconds": train + 5, "spec": {
        "epochs": 2, "workers": workers, "global_batch": 64 * workers if setup == "batch_per_worker" else 64},
        "workers": [{"steps_per_epoch": 100}], "samples_per_second": 6400.0 / train, "loss_curve": [2.0, 1.0],
        "compute_seconds": train * 0.75, "allreduce_wait_seconds": train * 0.25 if workers > 1 else 0.0,
        "cpu_mean_percent": 125.0}
    params = {setup: 64, "workers": workers}
    return {"params": params, "fields": params, "repeat": repeat, "state": "succeeded", "summary": summary,
            "machine": {"id": "m", "cores": 2}}


def test_a_scaling_report_has_its_table_the_split_and_four_plots(tmp_path):
    from orchestrator.analysis import report
    from orchestrator.experiments.model import Experiment

    cells = {f"{s}-{n}-{r}": _scaling_cell(s, n, t + r, r) for s in ("global_batch", "batch_per_worker")
             for n, t in ((1, 10.0), (2, 8.0), (4, 20.0)) for r in range(2)}
    rows = metrics.aggregate(cells)
    assert {r["samples_per_second"] is not None and r["loss_curve"] == [2.0, 1.0] for r in rows} == {True}
    experiment = Experiment(name="ddp", report={"title": "DDP", "scaling": True})
    text = report.write_experiment_report(experiment, False, cells, rows, tmp_path).read_text()
    # 2 workers: train 8.5 s (8 to 9) against 10.5 s: speedup 1.24, efficiency 0.62; 200 steps over 2 epochs.
    # The speedup's range is each repeat against the median one-worker time: 10.5/9 to 10.5/8.
    # One worker used 125% of a core: 2 cores allow a speedup of 1.6 at most, however many workers.
    assert ("| 2 | global_batch 64 | 64 | 8.50 (8.00–9.00) | 1.24 (1.17–1.31) | 1.60 | 0.618 (0.583–0.656) | 756 (711–800) | "
            "0.900 | 31.9 (30.0–33.8) | 10.6 (10.0–11.2) | 25% |") in text
    assert "| 4 | global_batch 64 | 64 | 20.5 (20.0–21.0) | 0.512 (0.500–0.525) | 1.60 |" in text
    assert "| 4 | batch_per_worker 64 | 256 |" in text
    # A batch per worker makes every step bigger: its extra step time is not called synchronisation.
    by = {(tuple(r["params"]), r["params"]["workers"]): r for r in rows}
    assert by[(("batch_per_worker", "workers"), 2)]["sync_share"] is None
    assert by[(("global_batch", "workers"), 2)]["sync_share"] is not None
    assert "**2 workers, global_batch 64:**" in text and "**2 workers, batch_per_worker 64:**" not in text
    assert "- 2 grid points take a larger global batch than their baseline" in text
    assert {p.name for p in tmp_path.glob("*.png")} == {"loss-curves.png", "speedup.png", "efficiency.png",
                                                         "training-comparison.png"}


def test_the_cpu_bound_is_the_cores_over_what_one_worker_used_and_never_more_than_n():
    from orchestrator.analysis.metrics import cpu_bound

    assert cpu_bound(8, 190.0, cores=2) == round(200 / 190, 3)  # one process already keeps both cores busy
    assert cpu_bound(3, 80.0, cores=2) == 2.5
    assert cpu_bound(3, 50.0, cores=2) == 3.0  # never more than N
    assert cpu_bound(3, None) is None and cpu_bound(3, 0.0) is None and cpu_bound(0, 90.0) is None


def test_the_scaling_plots_draw_the_core_limit_of_the_machine_not_n_times(tmp_path, monkeypatch):
    """3 and 4 workers on the 2 cores the cells were measured on: the speedup's ideal stops at 2 and the legend
    says it is the core limit; nothing draws 3× or 4×."""
    from orchestrator.analysis import plots

    drawn = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path: drawn.setdefault(path.name, fig) and path)
    cells = {f"g-{n}-{r}": _scaling_cell("global_batch", n, t + r, r) for n, t in ((1, 10.0), (3, 8.0), (4, 9.0))
             for r in range(2)}
    plots._scaling_plots(metrics.aggregate(cells), "workers", tmp_path, cores=metrics.cells_cores(cells))
    for name, want in (("speedup.png", [1.0, 2.0, 2.0]), ("efficiency.png", [1.0, 2 / 3, 0.5])):
        (ax,) = drawn[name].axes
        (limit,) = [line for line in ax.get_lines() if line.get_label().startswith("core limit: 2 cores")]
        assert list(limit.get_xdata()) == [1, 3, 4] and list(limit.get_ydata()) == pytest.approx(want)
        assert not any("N×" == line.get_label()[:2] for line in ax.get_lines())


# -- each figure's edges, which mutation testing (benchmarks/mutation.py) found the tests above left open -----------
def test_the_cpu_bound_holds_for_one_worker_and_a_worker_that_used_under_one_percent(monkeypatch):
    from orchestrator.analysis.metrics import cpu_bound

    assert cpu_bound(1, 100.0, 2) == 1.0 and cpu_bound(2, 0.5, 2) == 2.0
    assert cpu_bound(0, 100.0, 2) is None and cpu_bound(2, -5.0, 2) is None and cpu_bound(2, 0.0, 2) is None
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert cpu_bound(3, 100.0, 2) == 2.0  # the cores given, not this machine's
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert cpu_bound(3, 100.0) == 1.0  # no core count known: one


def test_the_machine_bound_is_the_floors_else_the_cpus_and_says_which():
    from orchestrator.analysis.metrics import machine_bound

    assert machine_bound({"floor_bound": 1.5, "cpu_bound": 2.0}) == (1.5, "floor")
    assert machine_bound({"cpu_bound": 2.0}) == (2.0, "cpu")
    assert machine_bound({}) == (None, "")


def test_a_run_is_compared_only_with_a_whole_one_worker_run_of_the_same_work():
    from orchestrator.analysis.metrics import run_baselines, run_key, run_workers

    spec = {"dataset": "mnist", "samples": 500, "epochs": 5, "global_batch": 96, "workers": 1}
    assert run_key(spec) == ("mnist", 500, 5, 96)
    assert run_workers({}) == 0 and run_workers({"spec": {"workers": 3}}) == 3
    assert run_baselines([{"spec": spec, "train_seconds": 10.0, "partial": True}]) == {}
    assert list(run_baselines([{"spec": spec, "train_seconds": 10.0}])) == [("mnist", 500, 5, 96)]


def test_a_grid_points_identity_does_not_depend_on_the_order_of_its_parameters():
    from orchestrator.analysis.metrics import point_id

    assert point_id({"b": 1, "a": 2}) == point_id({"a": 2, "b": 1}) == '{"a": 2, "b": 1}'


def test_speedup_and_step_ranges_hold_for_one_worker_one_epoch_and_times_under_a_second():
    from orchestrator.analysis.metrics import speedup_range, step_seconds

    assert speedup_range((0.8, 0.5, 1.0), 1.0, 2) == ((1.25, 1.0, 2.0), (0.625, 0.5, 1.0))
    assert speedup_range((10.0, 8.0, 20.0), 10.0, 1) == ((1.0, 0.5, 1.25), (1.0, 0.5, 1.25))
    assert speedup_range((10.0, 0.0, 20.0), 10.0, 2) == (None, None)
    assert step_seconds(10.0, 1, 5) == 2.0 and step_seconds(10.0, 0, 5) is None


def test_a_number_of_seconds_is_a_number_from_zero_to_the_records_limit_never_a_bool():
    from orchestrator.analysis.metrics import is_seconds
    from orchestrator.run.records import MAX_SECONDS

    assert [is_seconds(v) for v in (0, 0.5, MAX_SECONDS, 12)] == [True] * 4
    assert [is_seconds(v) for v in (True, -0.1, MAX_SECONDS + 1, "1", None)] == [False] * 5
