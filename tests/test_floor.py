"""An experiment's floor (report: {floor: true}): its arithmetic, its plumbing through a sweep with the runs faked,
its report; and a live sweep that measures it beside real cells."""
import importlib.util
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from orchestrator import bench, frameworks
from orchestrator.analysis import metrics, report
from orchestrator.errors import InvalidSpec
from orchestrator.experiments import floor
from orchestrator.experiments import sweep as experiments
from orchestrator.experiments.file import parse
from orchestrator.frameworks.tensorflow.trainer import model as tf_model
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths
from orchestrator.plan import cpuset, rank_cores
from tests.conftest import ROOT, run_orch


def test_the_models_parameters_are_those_the_trainers_build():
    assert floor.MLP_UNITS == tf_model.MLP_UNITS
    assert (floor.TEXT_EMBEDDING, floor.TEXT_HIDDEN) == (tf_model.TEXT_EMBEDDING, tf_model.TEXT_HIDDEN)
    assert "MLP_UNITS = (25, 15, 10)" in (ROOT / "orchestrator/frameworks/torch/trainer/torch_loop.py").read_text()
    assert floor.parameters("mlp") == 784 * 25 + 25 + 25 * 15 + 15 + 15 * 10 + 10 == 20_175
    # Seed 002's CNN: Conv(1, 32, 3), Conv(32, 64, 3), Linear(3136, 128), Linear(128, 10).
    assert floor.parameters("cnn") == (9 * 32 + 32) + (9 * 32 * 64 + 64) + (3136 * 128 + 128) + (128 * 10 + 10)
    assert floor.parameters("text", vocabulary=1000) == 1000 * 32 + 32 * 32 + 32 + 32 * 2 + 2
    with pytest.raises(ValueError):
        floor.parameters("resnet")


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 5, 8, 16])
@pytest.mark.parametrize("cores", [1, 2, 4])
def test_rank_cores_is_what_the_pinning_gives(workers, cores):
    each, share = rank_cores(workers, cores)
    sets = [cpuset(i, workers, cores) for i in range(workers)]
    used = [c for s in sets for c in range(int(s.split("-")[0]), int(s.split("-")[-1]) + 1)]
    assert each == len(range(int(sets[0].split("-")[0]), int(sets[0].split("-")[-1]) + 1))
    assert share == max(used.count(c) for c in set(used))


def test_each_framework_names_the_transport_of_its_gradients():
    known = {t.name for t in bench.known_transports()}

    def of(**fields):
        return frameworks.get(fields["framework"]).floor_transport(make_spec(run_id="x", **fields))

    assert of(framework="mpi", workers=3) == "mpi-shm"
    assert of(framework="mpi", workers=3, transport="tcp") == "mpi-tcp"
    assert of(framework="tensorflow", workers=3) == "tf-ring-bridge"
    assert of(framework="tensorflow", workers=3, strategy="custom", network="shared") == "tf-ring-loopback"
    assert of(framework="tensorflow", workers=3, strategy="ps") is None
    assert of(framework="torch", workers=2) == "gloo"
    assert {"mpi-shm", "mpi-tcp", "tf-ring-bridge", "tf-ring-loopback", "gloo"} <= known


def test_what_cannot_have_a_floor_says_why(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    assert floor.why_none(make_spec(run_id="x", framework="mpi", workers=3)) is None
    assert floor.why_none(make_spec(run_id="x", framework="tensorflow", workers=1)) is None
    assert "parameter server" not in (floor.why_none(make_spec(run_id="x", framework="tensorflow", workers=3,
                                                               strategy="ps")) or "")
    assert "all-reduces no gradients" in floor.why_none(make_spec(run_id="x", framework="tensorflow", workers=3,
                                                                  strategy="ps"))
    assert "swarm backend" in floor.why_none(make_spec(run_id="x", framework="mpi", workers=2, backend="swarm",
                                                       transport="tcp"))
    assert "script" in floor.why_none(make_spec(run_id="x", script=str(script), workers=2))


class _Info:
    def __init__(self, seconds, state="succeeded"):
        self.state, self.train_seconds, self.error = state, seconds, None


def test_the_solo_rank_runs_the_per_rank_batch_on_its_shard_pinned_as_a_rank_is(tmp_path):
    ran = []

    def run(spec, paths=None, host_cpus=None, stats_interval=1.0):
        ran.append((spec, host_cpus, stats_interval))
        return _Info(1.5)

    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    fields = {"framework": "mpi", "workers": 3, "dataset": "synthetic", "samples": 6000, "global_batch": 96}
    got = floor.solo(fields, "fl-x", paths, run, host_cpus=2)
    [(alone, cores, interval)] = ran
    assert (alone.workers, alone.samples, alone.global_batch, alone.run_id) == (1, 2000, 32, "fl-x")
    assert cores == 1 and interval is None  # pinned to one core, as each of 3 ranks on 2 cores is
    assert got["compute_floor"] == 3.0 and got["ranks_per_core"] == 2  # two ranks share a core
    assert got["transport"] == "mpi-shm" and got["gradient_bytes"] == 4 * 20_175
    one = floor.solo({**fields, "workers": 1}, "fl-y", paths, run, host_cpus=2)
    assert ran[-1][1] == 2 and one["transport"] is None and one["compute_floor"] == 1.5
    with pytest.raises(RuntimeError, match="solo rank failed"):
        floor.solo(fields, "fl-z", paths, lambda *a, **k: _Info(None, "failed"), host_cpus=2)


def test_mirrored_replicas_count_as_ranks_and_one_rank_is_its_own_floor(tmp_path):
    ran = []

    def run(spec, paths=None, host_cpus=None, stats_interval=1.0):
        ran.append((spec, host_cpus))
        return _Info(2.0)

    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    fields = {"framework": "tensorflow", "strategy": "mirrored", "replicas": 4, "dataset": "synthetic",
              "samples": 6000, "global_batch": 96}
    assert floor.ranks(make_spec(run_id="x", **fields)) == 4
    got = floor.solo(fields, "fl-m", paths, run, host_cpus=2)
    [(alone, cores)] = ran
    assert (alone.workers, alone.framework.replicas, alone.samples, alone.global_batch) == (1, 1, 1500, 24)
    assert cores == 1 and got["ranks_per_core"] == 2.0 and got["compute_floor"] == 4.0  # 4 threads on 2 cores
    assert got["transport"] is None  # the replicas reduce in memory
    three = floor.solo({**fields, "replicas": 3}, "fl-3", paths, run, host_cpus=2)
    assert three["ranks_per_core"] == 1.5  # threads, not pinned: the cores share 3 replicas evenly at best
    assert floor.why_none(make_spec(run_id="x", **fields)) is None
    spec = make_spec(run_id="cell-1", framework="mpi", workers=1, dataset="synthetic", samples=6000, global_batch=96)
    assert floor.ranks(spec) == 1
    own = floor.itself(spec, 3.5, host_cpus=2)
    assert own["itself"] and own["run_id"] == "cell-1" and own["compute_floor"] == 3.5 and own["solo_cores"] == 2
    assert floor._as_recorded(own) and not floor.needed({"floor": own})


def _paths(root="/nonexistent"):
    return Paths(runs=f"{root}/runs", cache=f"{root}/cache")


def _record(workers, seconds, floor_part=None, repeat=0):
    return {"params": {"workers": workers}, "repeat": repeat, "fields": {"workers": workers}, "state": "succeeded",
            "run_id": f"r{workers}-{repeat}", "floor": floor_part,
            "summary": {"spec": {"workers": workers, "epochs": 5, "global_batch": 96}, "train_seconds": seconds,
                        "test_accuracy": 0.9, "wall_seconds": seconds + 5, "cpu_mean_percent": 150.0,
                        "workers": [{"steps_per_epoch": 400}]}}


def test_one_transport_measurement_per_transport_ranks_and_size_fills_every_floor():
    records = [_record(1, 1.0, {"compute_floor": 1.0, "transport": None, "allreduce_p50_us": None}),
               *(_record(3, 3.0, {"compute_floor": 2.0, "transport": "mpi-shm", "gradient_bytes": 80_700,
                                  "allreduce_p50_us": None}, repeat=r) for r in range(2)),
               _record(2, 2.0, {"compute_floor": 1.2, "transport": "mpi-shm", "gradient_bytes": 80_700,
                                "allreduce_p50_us": 40.0}),  # measured by an earlier sweep
               _record(4, 9.0, {"none": "a script"})]
    asked = []

    def measure(sizes, ranks, transports, iterations, warmup, host=True, paths=None, say=None, engine=None):
        asked.append((sizes, ranks, transports, host))
        return [bench.Row(transports[0], "containers", ranks[0], sizes[0], p50_us=100.0)]

    floor.transport_floors(records, _paths(), lambda _line: None, measure=measure)
    assert asked == [([80_700], [3], ["mpi-shm"], False)]
    assert records[0]["floor"]["floor"] == 1.0 and records[0]["floor"]["steps"] == 2000
    for r in records[1:3]:
        assert r["floor"]["transport_floor"] == pytest.approx(0.2) and r["floor"]["floor"] == pytest.approx(2.2)
    assert records[3]["floor"]["floor"] == pytest.approx(1.2 + 40e-6 * 2000)
    assert "floor" not in records[4]["floor"]


def test_the_all_reduce_is_measured_on_the_engine_each_cell_ran_on():
    part = {"compute_floor": 2.0, "transport": "mpi-shm", "gradient_bytes": 80_700, "allreduce_p50_us": None}
    docker, podman = _record(3, 3.0, dict(part)), _record(3, 3.0, dict(part), repeat=1)
    podman["fields"]["engine"] = "podman"
    asked = []

    def measure(sizes, ranks, transports, *_args, engine=None, **_kwargs):
        asked.append(engine)
        return [bench.Row(transports[0], "containers", ranks[0], sizes[0], p50_us=100.0 if engine == "podman" else 50.0)]

    said = []
    floor.transport_floors([docker, podman], _paths(), said.append, measure=measure)
    assert sorted(asked) == ["docker", "podman"]  # once per engine, never one engine's figure for the other
    assert docker["floor"]["allreduce_p50_us"] == 50.0 and podman["floor"]["allreduce_p50_us"] == 100.0
    assert any(line.endswith("on podman") for line in said)


def test_a_transport_that_cannot_be_measured_leaves_its_floors_with_the_reason():
    records = [_record(2, 2.0, {"compute_floor": 1.2, "transport": "gloo", "gradient_bytes": 80_700,
                                "allreduce_p50_us": None})]

    def measure(*_args, **_kwargs):
        raise InvalidSpec("nothing to measure: gloo needs an image that is not built")

    said = []
    floor.transport_floors(records, _paths(), said.append, measure=measure)
    assert "not built" in records[0]["floor"]["error"] and "floor" not in records[0]["floor"]
    assert any("no transport floor for gloo" in line for line in said)


def _floored(workers, seconds, floor_s, repeat=0):
    part = {"compute_floor": floor_s - 0.1, "transport_floor": 0.1, "floor": floor_s}
    return _record(workers, seconds, part, repeat)


def test_aggregate_puts_each_row_against_its_floor_and_draws_t1_over_the_floor():
    cells = {"w1": _floored(1, 1.0, 0.9), "w3a": _floored(3, 3.0, 2.0), "w3b": _floored(3, 3.4, 2.2, 1),
             "w8": _record(8, 9.0, {"error": "its solo rank failed"})}
    rows = {r["params"]["workers"]: r for r in metrics.aggregate(cells)}
    three = rows[3]
    assert three["floor_seconds"] == (2.1, 2.0, 2.2) and three["vs_floor"] == pytest.approx(3.2 / 2.1)
    assert three["floor_bound"] == pytest.approx(1.0 / 2.1)  # T(1) / floor(3): the best speedup here
    assert metrics.machine_bound(three) == (three["floor_bound"], "floor")
    assert metrics.machine_bound(rows[8])[1] == "cpu" and rows[8]["floor_note"] == "its solo rank failed"
    bad = _record(2, 2.0, {"compute_floor": float("nan"), "transport_floor": 0.1, "floor": 1.0})
    assert metrics.aggregate({"b": bad})[0]["floor_seconds"] is None  # a hand-edited record is not a figure


def test_the_report_has_the_floor_table_and_says_why_a_row_has_none(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "machine_description", lambda: "a test machine")
    exp = parse("name: f\nbase: {dataset: synthetic}\ngrid: {workers: [1, 3, 8]}\nreport: {floor: true, "
                "scaling: true}\n")
    cells = {"w1": _floored(1, 1.0, 0.9), "w3": _floored(3, 3.0, 2.0),
             "w8": _record(8, 9.0, {"none": "the swarm backend: the floor is measured on this host's cores"})}
    text = report.write_experiment_report(exp, False, cells, metrics.aggregate(cells), tmp_path).read_text()
    section = text.split("## Against this machine's floor")[1]
    row = next(line for line in section.splitlines() if line.startswith("| 3 |"))
    # floor, T(N)/floor, T(1)/floor, to three significant digits
    assert "| 2.00 | 1.50 | 0.500 |" in row
    assert "8 workers, all: no floor: the swarm backend" in section
    scaling = text.split("## Scaling")[1].split("##")[0]
    assert "| 0.500 |" in next(line for line in scaling.splitlines() if line.startswith("| 3 |"))  # the bound
    # The row with no floor has the CPU bound, marked as such beside the floors, as in the results table.
    assert "(CPU)" in next(line for line in scaling.splitlines() if line.startswith("| 8 |")) and "marked CPU" in scaling
    assert "(CPU)" not in next(line for line in scaling.splitlines() if line.startswith("| 3 |"))


def _setup(params, seconds, floor_seconds=None):
    record = _record(params.get("workers", 1), seconds, {"floor": floor_seconds, "compute_floor": floor_seconds,
                                                         "transport_floor": 0.0} if floor_seconds else None)
    return {**record, "params": params, "fields": params}


def test_the_results_table_bounds_every_speedup_and_a_sweep_of_one_container_has_none(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "machine_description", lambda: "a test machine")
    exp = parse("name: s\nbase: {dataset: synthetic}\nsetups:\n  - {strategy: single}\n"
                "  - {strategy: mirrored, replicas: 2}\nreport: {baseline: {strategy: single}, floor: true}\n")
    cells = {"single": _setup({"strategy": "single"}, 2.0, 2.0),
             "mirrored": _setup({"strategy": "mirrored", "replicas": 2}, 6.0, 1.6)}
    text = report.write_experiment_report(exp, False, cells, metrics.aggregate(cells, baseline={"strategy": "single"}),
                                          tmp_path).read_text()
    table = text.split("## Results")[1].split("\n\n")[1].splitlines()
    heads = [h.strip() for h in table[0].strip("|").split("|")]
    row = [c.strip() for c in next(line for line in table if "mirrored" in line).strip("|").split("|")]
    assert row[heads.index("speedup")] == "0.333" and row[heads.index("bound")] == "1.25"  # T(1)/floor: 2.0 / 1.6
    assert "T(1) over the floor measured beside the point" in text
    # A point with no floor of its own (a parameter server) has the CPU bound, marked as such beside floors.
    ps = {**_setup({"strategy": "ps", "workers": 2}, 4.0), "floor": {"none": "a parameter server"}}
    cells = {**cells, "ps": ps}
    text = report.write_experiment_report(exp, False, cells, metrics.aggregate(cells, baseline={"strategy": "single"}),
                                          tmp_path).read_text()
    row = [c.strip() for c in next(line for line in text.splitlines() if "| ps |" in line).strip("|").split("|")]
    assert row[heads.index("bound")].endswith("(CPU)") and "marked CPU" in text
    batches = parse("name: b\nbase: {dataset: synthetic}\ngrid: {batch_size: [64, 512]}\n"
                    "report: {baseline: {batch_size: 512}}\n")
    cells = {"64": _setup({"batch_size": 64}, 3.0), "512": _setup({"batch_size": 512}, 2.0)}
    text = report.write_experiment_report(batches, False, cells,
                                          metrics.aggregate(cells, baseline={"batch_size": 512}), tmp_path).read_text()
    heads = text.split("## Results")[1].split("\n\n")[1].splitlines()[0]
    assert "T/T(baseline)" in heads and "speedup" not in heads and "bound" not in heads
    assert "no speedup to bound" in text


def test_an_experiment_without_the_floor_has_no_floor_section(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "machine_description", lambda: "a test machine")
    exp = parse("name: f\nbase: {dataset: synthetic}\ngrid: {workers: [1, 3]}\n")
    cells = {"w1": _record(1, 1.0), "w3": _record(3, 3.0)}
    text = report.write_experiment_report(exp, False, cells, metrics.aggregate(cells), tmp_path).read_text()
    assert "floor" not in text.lower()


def test_the_floor_option_is_a_boolean():
    assert parse("name: f\ngrid: {workers: [1, 2]}\nreport: {floor: true}\n").report.floor is True
    with pytest.raises(InvalidSpec):
        parse("name: f\ngrid: {workers: [1, 2]}\nreport: {floor: sometimes}\n")


def test_the_sweep_runs_a_solo_rank_beside_each_cell_and_the_transports_once(monkeypatch, tmp_path):
    """The sweep's plumbing with runner.up, collect and the bench faked: no engine."""
    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache", results=tmp_path / "results")
    specs, solos, asked = {}, [], []

    def fake_up(spec, paths=None, say=None, host_cpus=None, **_kwargs):
        specs[spec.run_id] = spec
        if "-floor" in spec.run_id:
            solos.append((spec.global_batch, spec.samples, host_cpus))
        return _Info(0.5 * 96 / spec.global_batch if "-floor" in spec.run_id else 1.0)

    def fake_collect(run_ids, out_root=None, paths=None):
        spec = specs[run_ids[0]]
        return [_record(spec.workers, 1.0 * spec.workers)["summary"] | {"run_id": spec.run_id, "failed": False,
                                                                         "spec": spec.model_dump(mode="json")}]

    def measure(sizes, ranks, transports, iterations, warmup, host=True, paths=None, say=None, engine=None):
        asked.append((ranks[0], transports[0]))
        return [bench.Row(transports[0], "containers", ranks[0], sizes[0], p50_us=50.0)]

    monkeypatch.setattr(experiments.start, "up", fake_up)
    monkeypatch.setattr(experiments, "collect", fake_collect)
    monkeypatch.setattr(bench, "run", measure)
    monkeypatch.setattr(report, "machine_description", lambda: "a test machine")
    text = "name: fl\nbase: {framework: mpi, dataset: synthetic, epochs: 5, samples: 6000}\ngrid: {workers: [1, 2]}\n"
    out, cells = experiments.run(parse(text), paths=paths)  # no floor asked: none measured
    assert not solos and not asked and all("floor" not in c for c in cells.values())
    out, cells = experiments.run(parse(text + "report: {floor: true}\n"), paths=paths)  # asked later: solos only
    cores = os.cpu_count() or 1
    assert solos == [(48, 3000, rank_cores(2, cores)[0])] and asked == [(2, "mpi-shm")]
    one = cells["workers1-r0"]["floor"]  # one rank: the cell is its own floor, not run again
    assert one["itself"] and one["run_id"] == cells["workers1-r0"]["run_id"] and one["floor"] == 1.0
    two = cells["workers2-r0"]["floor"]
    assert two["compute_floor"] == 1.0 * rank_cores(2, cores)[1]
    assert two["floor"] == pytest.approx(two["compute_floor"] + 50e-6 * 2000)
    assert json.loads((out / "cells.json").read_text())["workers2-r0"]["floor"]["floor"] == two["floor"]
    assert "## Against this machine's floor" in (out / "report.md").read_text()
    experiments.run(parse(text + "report: {floor: true}\n"), paths=paths)  # all there: nothing runs again
    assert len(solos) == 1 and len(asked) == 1


@pytest.mark.docker
def test_a_live_sweep_measures_the_floor_beside_its_cells(images, orch_env, tmp_path):
    exp = tmp_path / "floor.yaml"
    exp.write_text("name: floor-live\nbase: {framework: mpi, dataset: synthetic, epochs: 2, samples: 6000}\n"
                   "grid: {workers: [1, 2]}\nreport: {floor: true}\n")
    out = tmp_path / "results"
    proc = run_orch(["experiment", "run", str(exp), "--out", str(out)], orch_env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    cells = json.loads((out / "floor-live" / "cells.json").read_text())
    two = cells["workers2-r0"]["floor"]
    assert two["solo_batch"] == 48 and two["solo_samples"] == 3000 and two["transport"] == "mpi-shm"
    assert 0 < two["solo_seconds"] < 600 and 0 < two["allreduce_p50_us"] < 1e6  # measured, not assumed
    assert two["floor"] == pytest.approx(two["compute_floor"] + two["allreduce_p50_us"] * 1e-6 * two["steps"])
    one = cells["workers1-r0"]["floor"]
    assert one["itself"] and one["transport"] is None
    assert one["floor"] == cells["workers1-r0"]["summary"]["train_seconds"]  # the cell is its own floor
    text = (out / "floor-live" / "report.md").read_text()
    row = next(line for line in text.split("## Against this machine's floor")[1].splitlines()
               if line.startswith("| 2 |"))
    assert float(row.split("|")[8]) > 0  # T(N)/floor
    page = (out / "floor-live" / "report.html").read_text()
    assert "T(N)/floor" in page and '"bound_kind": "floor"' in page  # the page draws T(1)/floor too


@pytest.mark.docker
def test_a_live_sweep_of_mirrored_replicas_runs_one_replica_alone_for_their_floor(images, orch_env, tmp_path):
    exp = tmp_path / "replicas.yaml"
    exp.write_text("name: replicas-live\nbase: {strategy: mirrored, dataset: synthetic, epochs: 1, samples: 3000}\n"
                   "grid: {replicas: [2]}\nreport: {scale: replicas, floor: true}\n")
    out = tmp_path / "results"
    proc = run_orch(["experiment", "run", str(exp), "--out", str(out)], orch_env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    [cell] = json.loads((out / "replicas-live" / "cells.json").read_text()).values()
    floor_part = cell["floor"]
    cores = os.cpu_count() or 1
    assert floor_part["solo_batch"] == 48 and floor_part["solo_samples"] == 1500
    assert floor_part["solo_cores"] == rank_cores(2, cores)[0]  # the cores one of 2 replicas would have
    assert floor_part["transport"] is None and floor_part["ranks_per_core"] == max(1.0, 2 / cores)
    assert 0 < floor_part["solo_seconds"] < 600 and floor_part["floor"] == floor_part["solo_seconds"]
    assert floor_part["run_id"] != cell["run_id"]  # a run of its own, not the cell again
    text = (out / "replicas-live" / "report.md").read_text()
    assert "| 2 | all |" in text.split("## Against this machine's floor")[1]


def test_the_text_models_gradients_come_from_the_prepared_vocabulary(tmp_path):
    import numpy as np

    from orchestrator import contract

    paths = Paths(runs=tmp_path / "runs", cache=tmp_path / "cache")
    folder = paths.data / "vader-reviews"
    folder.mkdir(parents=True)
    np.savez(folder / contract.VADER_REVIEWS_FILE, x=np.zeros((4, 8), np.int32), y=np.zeros(4, np.uint8),
             train=np.int64(2), vocabulary_size=np.int64(500))
    spec = make_spec(run_id="x", framework="tensorflow", dataset="vader-reviews", model="text", workers=2,
                     samples=10000)
    assert floor.gradient_bytes(spec, paths) == 4 * floor.parameters("text", vocabulary=500)


@pytest.mark.parametrize("edit", [{"compute_floor": "fast"}, {"gradient_bytes": "80K"}, {"transport": "carrier"},
                                  {"allreduce_p50_us": float("inf")}, {"compute_floor": True}])
def test_a_floor_record_edited_by_hand_is_no_figure_and_stops_nothing(edit):
    part = {"compute_floor": 2.0, "transport": "mpi-shm", "gradient_bytes": 80_700, "allreduce_p50_us": 40.0, **edit}
    records = [_record(3, 3.0, part), _record(2, 2.0, {"compute_floor": 1.0, "transport": "mpi-shm",
                                                       "gradient_bytes": 80_700, "allreduce_p50_us": 40.0})]
    floor.transport_floors(records, _paths(), lambda _line: None, measure=lambda *a, **k: [])
    assert "not one orch wrote" in records[0]["floor"]["error"] and "floor" not in records[0]["floor"]
    assert records[1]["floor"]["floor"] == pytest.approx(1.0 + 40e-6 * 2000)


def test_a_failed_floor_is_measured_again_on_resume_and_one_that_cannot_be_is_not():
    assert floor.needed({}) and floor.needed({"floor": {"error": "its solo rank failed"}})
    assert not floor.needed({"floor": {"none": "a script"}}) and not floor.needed({"floor": {"compute_floor": 1.0}})
    records = [_record(2, 2.0, {"compute_floor": 1.0, "transport": "gloo", "gradient_bytes": 80_700,
                                "allreduce_p50_us": None, "error": "the all-reduce was not measured: no image"})]
    floor.transport_floors(records, _paths(), lambda _line: None, measure=lambda sizes, ranks, transports, *a, **k: [
        bench.Row(transports[0], "containers", ranks[0], sizes[0], p50_us=10.0)])
    assert "error" not in records[0]["floor"] and records[0]["floor"]["floor"] == pytest.approx(1.0 + 0.02)


def _floor_benchmark():
    spec = importlib.util.spec_from_file_location("floor_benchmark", ROOT / "benchmarks" / "floor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_floor_benchmark_splits_the_wall_time_beyond_training_into_its_stages():
    split = _floor_benchmark().split
    # Two workers; each stage ends when the last worker leaves it. Seconds after the run began at 100.
    stages = {"importing": [101.5, 101.2], "loading": [105.0, 105.4], "connecting": [105.6, 105.9],
              "training": [107.0, 107.0]}
    cpu = {"importing": [0.2, 0.3], "loading": [3.0, 3.1], "connecting": [3.3, 3.4], "training": [3.9, 4.0]}
    measured = {"started": 100.0, "first_container": 100.8, "stages": stages, "stage_cpu": cpu, "done": [117.0, 117.1],
                "wall_seconds": 17.8, "train_seconds": 10.0}
    got = split(measured)
    assert got == pytest.approx({
        "create": 0.8, "start": 0.4, "create_and_start": 1.2, "import": 4.2, "data": 0.5, "rendezvous": 1.1,
        "connect_and_load": 1.6, "train_and_test": 10.1, "results_and_teardown": 0.7, "beyond_train": 7.8,
        "train": 10.0, "cpu_before_import": 0.5, "cpu_import": 5.6, "cpu_data": 0.6, "cpu_rendezvous": 1.2,
        "cpu_connect_and_load": 1.8, "cpu_to_train": 7.9})
    # The stages still add up to the wall time beyond training, less what the train clock does not hold.
    parts = ("create", "start", "import", "data", "rendezvous", "train_and_test", "results_and_teardown")
    assert sum(got[k] for k in parts) == pytest.approx(measured["wall_seconds"])
    # A trainer that marks no loading (an older image) has its data in the rendezvous's place; no container start
    # recorded (or one outside the run's bounds), no create and start apart.
    older = {**measured, "first_container": None, "stages": {k: v for k, v in stages.items() if k != "loading"},
             "stage_cpu": {k: v for k, v in cpu.items() if k != "loading"}}
    got = split(older)
    assert got["create"] is got["start"] is got["data"] is got["rendezvous"] is got["cpu_data"] is None
    assert got["import"] == pytest.approx(4.7) and got["connect_and_load"] == pytest.approx(1.1)
    assert got["cpu_import"] == pytest.approx(6.2)
    assert split({**measured, "first_container": 99.0})["create"] is None


def test_the_floor_benchmark_splits_a_run_into_its_steps_and_the_rest():
    split = _floor_benchmark().epochs_split
    # Keras' epochs: the steps are what is left of an epoch's seconds after its end (validation, metrics, checkpoint).
    keras = SimpleNamespace(train_seconds=10.0, epochs=[
        {"seconds": 4.0, "validation_seconds": 0.3, "reduction_seconds": 0.1, "checkpoint_seconds": 0.1},
        {"seconds": 2.5, "validation_seconds": 0.3, "reduction_seconds": 0.1, "checkpoint_seconds": 0.1},
        {"seconds": 2.7, "validation_seconds": 0.3, "reduction_seconds": 0.2, "checkpoint_seconds": 0.2}])
    got = split([keras])
    assert got == pytest.approx({"steady_steps": 6.0, "first_epoch_extra": 1.5, "epoch_ends": 1.7,
                                 "outside_epochs": 0.8})
    assert sum(got.values()) == pytest.approx(keras.train_seconds)
    # Its epochs' ends, each part per epoch: 0.3 validation, 0.4 / 3 metrics, 0.4 / 3 checkpoint.
    ends = _floor_benchmark().epoch_ends([keras])
    assert ends == pytest.approx({"validation_seconds": 0.3, "reduction_seconds": 0.4 / 3,
                                  "checkpoint_seconds": 0.4 / 3})
    assert sum(ends.values()) * 3 == pytest.approx(got["epoch_ends"])
    # A trainer that measures its steps (PyTorch, MPI): compute and the all-reduce wait; the median of the workers.
    ranks = [SimpleNamespace(train_seconds=t, epochs=[
        {"seconds": 3.0, "compute_seconds": 1.0 + w, "allreduce_wait_seconds": 1.5},
        {"seconds": 2.0, "compute_seconds": 1.0, "allreduce_wait_seconds": 0.5}]) for t, w in ((5.5, 0.2), (5.7, 0.4))]
    assert split(ranks) == pytest.approx({"steady_steps": 3.0, "first_epoch_extra": 1.3, "epoch_ends": 0.7,
                                          "outside_epochs": 0.6})
    # Without two epochs, or without the figures, no split is made up.
    assert split([SimpleNamespace(train_seconds=3.0, epochs=keras.epochs[:1])]) is None
    assert split([SimpleNamespace(train_seconds=3.0, epochs=[{"seconds": 1.0}, {"seconds": 1.0}])]) is None


def test_the_floor_benchmark_puts_the_steps_and_the_rest_each_beside_its_floor():
    row = {"workers": 3, "train_seconds": 10.0, "vs_one": 2.0, "solo_seconds": 3.0, "solo_batch": 32, "solo_cores": 1,
           "ranks_per_core": 2, "compute_floor": 6.0, "allreduce_p50_us": 500.0, "transport_floor": 1.0,
           "floor": 7.0, "vs_floor": 10.0 / 7.0, "wall_seconds": 18.0, "container_memory_mb": 500.0,
           "orch_cpu_seconds": 0.3, "steps": 2000, "in_place_ms": None,
           "epochs_split": {"steady_steps": 6.0, "first_epoch_extra": 1.5, "epoch_ends": 2.0, "outside_epochs": 0.5},
           "solo_epochs_split": {"steady_steps": 2.0, "first_epoch_extra": 0.5, "epoch_ends": 0.4,
                                 "outside_epochs": 0.1},
           "ends": {"validation_seconds": 0.2, "reduction_seconds": 0.1, "checkpoint_seconds": 0.1},
           "solo_ends": {"validation_seconds": 0.05, "reduction_seconds": 0.01, "checkpoint_seconds": 0.02}}
    overhead = {"workers": 3, "create_and_start": 1.0, "import": 4.0, "connect_and_load": 1.5, "train_and_test": 10.5,
                "create": 0.7, "start": 0.3, "data": 0.4, "rendezvous": 1.1,
                "results_and_teardown": 0.6, "beyond_train": 8.0, "start_floor": 5.0, "start_floor_volume": 4.0,
                "start_floor_package": 3.0, "module": "tensorflow, tf_keras, mpi4py", "cpu_to_train": None,
                "probe_import": 5.0, "probe_connect": 6.4,
                "ladder_runs": {"start_floor_volume": [3.5, 4.0, 4.5], "import": [5.0, 4.8, 5.5],
                                "connect": [6.4, 6.0, 7.0], "beyond_train": [8.0, 7.5, 9.0]}}
    text = _floor_benchmark().markdown({"when": "now", "repeats": 1, "workload": {}, "frameworks": {
        "mpi": {"rows": [row], "overhead": overhead}}})
    before, after = text.split("Where the wall time beyond training goes")
    [split] = [line.split("|")[1:-1] for line in before.splitlines()
               if line.startswith("| mpi |") and len(line.split("|")) == 15]
    # The steps against the solo rank's steps on the shared core plus the transport: 6.0 / (2 × 2.0 + 1.0); the rest
    # (1.5 + 2.0 + 0.5) against the solo rank's rest on the shared core, 2 × 1.0.
    assert [c.strip() for c in split] == ["mpi", "3", "10.00", "6.00", "5.00", "1.20", "1.50", "2.00", "0.50",
                                          "4.00", "2.00", "2.00", "1.43"]
    [ends] = [line.split("|")[1:-1] for line in text.splitlines()
              if line.startswith("| mpi |") and len(line.split("|")) == 12]
    [start] = [line.split("|")[1:-1] for line in after.splitlines()
               if line.startswith("| mpi |") and len(line.split("|")) == 15]
    assert [c.strip() for c in ends] == ["mpi", "3", "0.200", "0.100", "0.100", "0.400", "0.080", "0.050", "0.010",
                                         "0.020"]
    # The start-up against the start floor whose containers import what the trainer imports (named above the
    # table) and read their environment as orch's do, from a volume; the package alone beside it.
    assert "mpi: tensorflow, tf_keras, mpi4py" in text
    assert [c.strip() for c in start] == ["mpi", "0.70", "0.30", "4.00", "0.40", "1.10", "10.50", "0.60", "8.00",
                                          "5.00", "4.00", "2.00", "3.00"]
    # A run measured before the split: each pair's sum, in the cell that holds most of it.
    old = {k: v for k, v in overhead.items() if k not in ("create", "start", "data", "rendezvous")}
    text = _floor_benchmark().markdown({"when": "now", "repeats": 1, "workload": {}, "frameworks": {
        "mpi": {"rows": [row], "overhead": old}}})
    [start] = [line.split("|")[1:-1] for line in text.split("Where the wall time beyond training goes")[1].splitlines()
               if line.startswith("| mpi |") and len(line.split("|")) == 15]
    assert [c.strip() for c in start[:6]] == ["mpi", "1.00 (with start)", "—", "4.00", "—", "1.50 (with data)"]
    # The start ladder: the floor from the volume, orch importing, orch importing and joining, the trainer's
    # wall − train; what each rung adds, and the trainer against the framework-only run; then each rung's range.
    rungs = text.split("The start ladder,")[1].split("The CPU behind it")[0]
    [ladder] = [line.split("|")[1:-1] for line in rungs.splitlines()
                if line.startswith("| mpi |") and len(line.split("|")) == 11]
    assert [c.strip() for c in ladder] == ["mpi", "4.00", "5.00", "6.40", "8.00", "1.00", "1.40", "1.60", "1.25"]
    [ranges] = [line.split("|")[1:-1] for line in text.splitlines()
                if line.startswith("| mpi |") and len(line.split("|")) == 7]
    assert [c.strip() for c in ranges] == ["mpi", "3.50–4.50", "4.80–5.50", "6.00–7.00", "7.50–9.00"]


def test_the_html_report_of_an_experiment_reckons_n_and_speedup_as_report_md_does():
    from orchestrator.analysis import html

    rows = [{"run_id": "one", "workers": 1}, {"run_id": "four", "workers": 1}, {"run_id": "other", "workers": 2}]
    summaries = [{"train_seconds": 2.0, "spec": {"workers": 1}}, {"train_seconds": 4.0, "spec": {"workers": 1}},
                 {"train_seconds": 3.0, "spec": {"workers": 2}}]
    # mirrored-mnist's replicas: both runs are one container; its N is the replicas, against the 1-replica point
    html._with_scaling(rows, summaries, floors={"four": 2.5}, against={"one": (1, 2.0, 1.0), "four": (4, 2.0, 2.0)})
    assert [r["n"] for r in rows] == [1, 4, 2]
    assert rows[1]["speedup"] == 0.5 and rows[1]["efficiency"] == 0.125
    assert rows[1]["bound"] == 0.8 and rows[1]["bound_kind"] == "floor"  # T(1) 2.0 over its floor 2.5
    assert rows[2]["speedup"] is None  # a run the experiment does not reckon has no baseline


def test_the_sweep_gives_report_html_each_cells_n_and_baseline_from_report_mds_rows():
    from orchestrator.experiments.sweep import against

    cells = {"r1-0": {**_record(1, 2.0), "run_id": "a"}, "r1-1": {**_record(1, 2.2), "run_id": "b"},
             "r3-0": {**_record(3, 6.0), "run_id": "c"}, "bad": {"params": {"workers": 2}, "fields": {"workers": 2},
                                                                   "state": "failed"}}
    rows = metrics.aggregate(cells)
    got = against(cells, rows)
    assert set(got) == {"a", "b", "c"}  # the failed cell without a run has none
    assert got["c"][0] == 3 and got["c"][1] == pytest.approx(2.1)  # N, and T(1): the median of the 1-worker runs
    assert got["a"][:2] == (1, pytest.approx(2.1))
    # A sweep of one point (repeats alone, no grid) has empty parameters: its runs are that point's all the same;
    # a hand-edited record whose parameters are not a mapping has none.
    one = {"r0": {**_record(1, 2.0), "params": {}, "run_id": "d"}, "odd": {"params": [1], "run_id": "e"}}
    assert set(against(one, metrics.aggregate({"r0": one["r0"]}))) == {"d"}


def test_a_page_of_one_container_runs_shows_no_speedup():
    from orchestrator.analysis import html

    runs = [{"run_id": "x", "workers": 1, "n": 1}]
    assert html._columns(runs, axis=None) == [(k, "T/T(baseline)" if k == "time_ratio" else name)
                                              for k, name in html.COLUMNS
                                              if k not in ("speedup", "bound", "efficiency")]
    assert html._columns([*runs, {"run_id": "y", "workers": 2, "n": 2}], axis="containers") == html.COLUMNS


def test_the_processes_benchmark_puts_every_peer_on_loopback_with_a_port_of_its_own():
    spec = importlib.util.spec_from_file_location("processes_benchmark", ROOT / "benchmarks" / "processes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = {"cluster": {"chief": ["chief-0:2222"], "worker": ["worker-0:2222", "worker-1:2222"]},
              "task": {"type": "worker", "index": 1}}
    env = module._loopback({"TF_CONFIG": json.dumps(config), "ORCH_CPUS": "1"})
    moved = json.loads(env["TF_CONFIG"])
    # One network namespace holds every process: the same port on each container's address becomes one each.
    assert moved == {"cluster": {"chief": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]},
                     "task": {"type": "worker", "index": 1}} and env["ORCH_CPUS"] == "1"
    assert module._loopback({"MASTER_ADDR": "worker-0", "RANK": "1"}) == {"MASTER_ADDR": "127.0.0.1",
                                                                                   "RANK": "1"}


def test_start_ab_names_its_baseline_by_commit_and_refuses_what_is_not_one():
    spec = importlib.util.spec_from_file_location("start_ab_benchmark",
                                                  ROOT / "benchmarks" / "investigations" / "start_ab.py")
    start_ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(start_ab)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    assert start_ab._commit("HEAD") == head  # a name that moves on is recorded as the commit it was
    proc = subprocess.run([sys.executable, "benchmarks/investigations/start_ab.py", "--before", "no-such-revision"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        "start_ab: 'no-such-revision' is not a commit of this repository (`git log --oneline` lists them)"]


def test_the_html_reports_core_limit_is_min_of_n_and_the_hosts_cores_at_each_n():
    """1 against 3 containers on 2 cores: the limit is 1 at N = 1 and 2 at N = 3, not N× (3)."""
    from orchestrator.analysis import html

    assert html.core_limit([1, 3, 3, None, 0], 2) == [[1, 1], [3, 2]]
    assert html.core_limit([1, 2, 4, 8], 16) == [[1, 1], [2, 2], [4, 4], [8, 8]]
    from orchestrator.analysis import charts  # what the charts draw

    rows = [{"params": {"workers": n}, "n": n, "train_seconds": (t, t, t), "speedup_range": None,
             "efficiency_range": None} for n, t in ((1, 2.0), (3, 4.0))]
    [limit] = [t for t in charts.against_n(rows, "workers", "containers", 2)[1]["data"] if t["name"].startswith("core")]
    assert [[x, y] for x, y in zip(limit["x"], limit["y"])] == html.core_limit([1, 3], 2)
