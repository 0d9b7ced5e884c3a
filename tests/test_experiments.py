"""Experiment files: loading, grid expansion, quick mode, resume, aggregation; and a live --quick sweep."""
import json
from pathlib import Path

import pytest

from orchestrator.errors import InvalidSpec
from orchestrator.experiments import Cell, aggregate, expand, is_done, load, parse

from .conftest import ROOT, run_orch

GRID = """
name: t
base: {dataset: synthetic, epochs: 2}
grid: {workers: [1, 2, 3], samples: [6000, 12000]}
repeats: 2
"""


def test_grid_times_repeats():
    cells = expand(parse(GRID))
    assert len(cells) == 12
    assert cells[0].key == "workers1-samples6000-r0" and cells[1].key == "workers1-samples6000-r1"
    assert cells[-1].fields == {"dataset": "synthetic", "epochs": 2, "workers": 3, "samples": 12000}
    assert len({c.key for c in cells}) == 12


def test_quick_uses_the_quick_section():
    exp = parse(GRID + "quick: {epochs: 1, samples: [3000], repeats: 1}\n")
    cells = expand(exp, quick=True)
    assert [c.key for c in cells] == ["workers1-samples3000-r0", "workers2-samples3000-r0", "workers3-samples3000-r0"]
    assert all(c.fields["epochs"] == 1 for c in cells)


def test_quick_default_scales_samples_and_epochs_down():
    cells = expand(parse(GRID.replace("[6000, 12000]", "[5000, 60000]")), quick=True)
    assert sorted({c.fields["samples"] for c in cells}) == [3000, 6000]
    assert {c.fields["epochs"] for c in cells} == {1} and {c.repeat for c in cells} == {0}


def test_committed_experiment_files_are_valid():
    for path in (ROOT / "experiments").glob("*.yaml"):
        exp = load(path)
        assert expand(exp) and expand(exp, quick=True)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("- a\n- b\n", "must be a mapping"),
        ("name: [unclosed\n", "not valid YAML"),
        ("name: t\ncolour: red\n", "colour"),
        ("name: Bad Name\n", "name"),
        ("name: t\ngrid: {run_id: [a]}\n", "cannot sweep run_id"),
        ("name: t\ngrid: {workers: []}\n", "needs at least one value"),
        ("name: t\ngrid: {workers: [1, 0]}\n", "cell workers0-r0: workers"),
        ("name: t\nbase: {wrokers: 2}\n", "unknown field wrokers"),
        ("name: t\nbase: {workers: \"two; rm -rf /\"}\n", "workers"),
        ("name: t\nrepeats: -1\n", "repeats"),
        ("name: t\nrepeats: 1000000\n", "repeats"),
        ("name: t\nbase: {dataset: mnist, samples: 70000}\n", "samples"),
        ("name: t\nbase: {run_id: x}\n", "unknown field run_id"),
    ],
)
def test_bad_experiment_files_name_the_problem(text, needle):
    with pytest.raises(InvalidSpec) as info:
        parse(text, "exp.yaml")
    assert needle in info.value.message and "\n" not in info.value.message


def test_resume_skips_only_succeeded_cells_with_the_same_spec():
    cell = Cell(key="k", params={"workers": 1}, repeat=0, fields={"workers": 1, "epochs": 2})
    assert is_done({"state": "succeeded", "fields": {"workers": 1, "epochs": 2}}, cell)
    assert not is_done({"state": "failed", "fields": {"workers": 1, "epochs": 2}}, cell)
    assert not is_done({"state": "succeeded", "fields": {"workers": 1, "epochs": 3}}, cell)
    assert not is_done(None, cell)


def _cell(workers, samples, seconds, state="succeeded", acc=0.9):
    summary = {"test_accuracy": acc, "train_seconds": seconds, "wall_seconds": seconds + 10, "cpu_mean_percent": 80.0,
               "net_bytes": 3_000_000 * workers, "spec": {"epochs": 5, "workers": workers},
               "workers": [{"steps_per_epoch": 100}]}
    return {"params": {"workers": workers, "samples": samples}, "fields": {"workers": workers, "samples": samples},
            "state": state, "summary": summary if state == "succeeded" else {}}


def test_aggregate_medians_ratios_and_sync_share():
    cells = {"a": _cell(1, 5000, 2.0), "b": _cell(1, 5000, 4.0), "c": _cell(1, 5000, 3.0),
             "d": _cell(3, 5000, 30.0), "e": _cell(3, 5000, 0, state="failed")}
    rows = {r["params"]["workers"]: r for r in aggregate(cells)}
    assert rows[1]["train_seconds"] == (3.0, 2.0, 4.0)
    assert rows[3]["time_ratio"] == pytest.approx(10.0) and rows[3]["efficiency"] == pytest.approx(1 / 30)
    assert rows[3]["runs"] == 2 and rows[3]["failed"] == 1
    # 30 s / 500 steps = 60 ms per step against 6 ms: 54 ms, 90 % of the step, is synchronisation.
    assert rows[3]["sync_seconds_per_step"] == pytest.approx(0.054) and rows[3]["sync_share"] == pytest.approx(0.9)
    assert rows[3]["net_bytes_per_worker"][0] == 3_000_000


@pytest.mark.docker
def test_quick_two_cell_experiment_writes_a_report_and_resumes(images, orch_env, tmp_path):
    exp = tmp_path / "two.yaml"
    exp.write_text("name: two-cells\nbase: {dataset: synthetic, epochs: 2, steps_per_execution: 10}\n"
                   "grid: {workers: [1, 2]}\nquick: {samples: 6000}\n")
    out = tmp_path / "results"
    proc = run_orch(["experiment", "run", str(exp), "--quick", "--out", str(out)], orch_env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    report = (out / "two-cells-quick" / "report.md").read_text()
    table = [line for line in report.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(table) == 2, report
    for line in table:
        cols = [c.strip() for c in line.strip("|").split("|")]
        assert cols[1] == "1/1" and float(cols[2]) > 0 and float(cols[3]) > 0  # real accuracy and time
    assert "1.00x" in table[0]
    cells = json.loads((out / "two-cells-quick" / "cells.json").read_text())
    assert {c["state"] for c in cells.values()} == {"succeeded"}
    assert (out / "two-cells-quick" / "time-vs-workers.png").stat().st_size > 5000
    again = run_orch(["experiment", "run", str(exp), "--quick", "--out", str(out), "--dry-run"], orch_env)
    assert again.stdout.count("done, skipped") == 2
    resumed = run_orch(["experiment", "run", str(exp), "--quick", "--out", str(out)], orch_env)
    assert resumed.returncode == 0 and "2/2 cells done (0 failed, 2 skipped)" in resumed.stderr
    assert json.loads((out / "two-cells-quick" / "cells.json").read_text()) == cells
