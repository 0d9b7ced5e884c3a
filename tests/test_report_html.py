"""report.html of a two-axis sweep (workers × samples, repeats), rendered from synthetic collected-run folders with the
engine faked: every point its charts plot against N is report.md's figure for that grid point, every run's
per-container charts are in the page, and the text in it is inert. The page's charts are Plotly figures the Python
side computed (orchestrator/analysis/charts.py), so they are read here from its JSON block, with no browser;
tests/test_report_browser.py opens such a page in headless Chromium."""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from orchestrator.analysis import charts, report
from orchestrator.analysis.numbers import median_range, sig
from orchestrator.experiments import sweep as experiments
from orchestrator.experiments.file import parse
from orchestrator.paths import Paths

SWEEP = ("name: two-axes\nbase: {dataset: synthetic, epochs: 2}\ngrid: {workers: [1, 2, 3], samples: [3000, 6000]}\n"
         "repeats: 3\nreport: {title: 'Two axes: {workers} containers', floor: false}\n")


def seconds_of(spec, repeat: int) -> float:
    """A made-up train time that differs per workers, samples and repeat, so that a point mixed up shows."""
    return round((1.0 + 0.9 * (spec.workers - 1)) * spec.samples / 1000 * (1 + 0.07 * repeat), 4)


def write_run(folder: Path, spec, seconds: float) -> dict:
    """A results folder as `orch collect` writes it: summary.json, epochs.csv and stats.csv."""
    folder.mkdir(parents=True)
    workers = [f"worker-{i}" for i in range(spec.workers)]
    summary = {"run_id": spec.run_id, "state": "succeeded", "failed": False, "spec": spec.model_dump(mode="json"),
               "train_seconds": seconds, "test_accuracy": 0.9 - 0.01 * spec.workers, "wall_seconds": seconds + 5,
               "cpu_mean_percent": 90.0, "net_bytes": 1_000_000 * (spec.workers - 1),
               "samples_per_second": spec.samples * 2 / seconds, "workers": [{"steps_per_epoch": 10}], "files": []}
    (folder / "summary.json").write_text(json.dumps(summary))
    with (folder / "epochs.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["worker", "epoch", "loss", "accuracy", "val_accuracy"])
        for i in range(spec.workers):
            w.writerows([[i, 1, 0.9, 0.6, 0.62], [i, 2, 0.5, 0.8, 0.79]])
    with (folder / "stats.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["time", "container", "role", "worker", "cpu_percent", "mem_used_bytes", "net_rx_bytes",
                    "net_tx_bytes"])
        for t in range(4):
            for i, _ in enumerate(workers):  # one worker alone moves a few bytes: next to nothing
                moved = (t * 3 << 20) if spec.workers > 1 else t * 40
                w.writerow([1000 + t, f"c{i}", "worker", i, 50 + 10 * t, 1 << 20, moved, moved // 2])
    return summary


@pytest.fixture
def swept(monkeypatch, tmp_path):
    """The sweep run through the real sweep code, up and collect faked: (folder, report.md text, page data)."""
    specs = {}

    def fake_up(spec, paths=None, say=None, **_kwargs):
        specs[spec.run_id] = spec

    def fake_collect(run_ids, out_root=None, paths=None):
        spec = specs[run_ids[0]]
        repeat = int(re.search(r"-r(\d+)-", spec.run_id).group(1))
        return [write_run(out_root / spec.run_id, spec, seconds_of(spec, repeat))]

    monkeypatch.setattr(experiments.start, "up", fake_up)
    monkeypatch.setattr(experiments, "collect", fake_collect)
    monkeypatch.setattr(report, "machine_description", lambda: "a test machine")
    out, cells = experiments.run(parse(SWEEP), paths=Paths(runs=tmp_path / "runs", cache=tmp_path / "cache",
                                                           results=tmp_path / "results"))
    return out, cells, (out / "report.md").read_text(), page_data((out / "report.html").read_text())


def page_data(page: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1))


def results_table(text: str) -> dict[tuple[str, str], dict[str, str]]:
    """report.md's results table: (workers, samples) -> {column: cell}."""
    lines = text.split("## Results")[1].split("\n\n")[1].splitlines()
    heads = [h.strip() for h in lines[0].strip("|").split("|")]
    rows = [dict(zip(heads, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]
    return {(r["workers"], r["samples"]): r for r in rows}


def figure(data: dict, section: str, title: str) -> dict:
    [found] = [f for s in data["sections"] if s["title"] == section for f in s["figures"]
               if f["layout"]["title"]["text"].startswith(title)]
    return found


def test_every_point_against_n_is_report_mds_figure_for_its_grid_point_one_line_per_other_axis(swept):
    _out, _cells, text, data = swept
    table = results_table(text)
    assert len(table) == 6
    against = "Against the number of containers"
    plotted = 0
    for title, column, ranged in (("Train time", "train s", True), ("Speedup", "speedup", False),
                                  ("Efficiency", "efficiency", False)):
        fig = figure(data, against, title)
        measured = [t for t in fig["data"] if t["name"] in ("samples 3000", "samples 6000")]
        assert sorted(t["name"] for t in measured) == ["samples 3000", "samples 6000"]  # a line per other axis
        for trace in measured:
            samples = trace["name"].split()[1]
            assert trace["x"] == [1, 2, 3]
            for n, y, up, down in zip(trace["x"], trace["y"], trace["error_y"]["array"],
                                      trace["error_y"]["arrayminus"]):
                cell = table[(str(n), samples)][column]
                if ranged:  # the median and the repeats' min–max, as report.md writes them
                    assert median_range((y, y - down, y + up)) == cell, (title, n, samples)
                    assert down > 0 and up > 0  # three repeats that differ
                else:
                    assert sig(y) == cell, (title, n, samples)
                plotted += 1
        assert fig["layout"]["xaxis"]["tickvals"] == [1, 2, 3]  # whole numbers of workers only
    assert plotted == 18
    # The bounds, labelled: the core limit min(N, cores) at each N and the CPU bound of each line.
    speedup = figure(data, against, "Speedup")
    [limit] = [t for t in speedup["data"] if t["name"].startswith("core limit")]
    assert limit["y"] == [float(min(n, data["cores"])) for n in (1, 2, 3)] and limit["text"][-1] == "core limit"
    assert sum(t["name"].startswith("bound (cores)") for t in speedup["data"]) == 2


def test_the_page_reaches_every_runs_per_container_charts_and_names_the_sweeps_own_values(swept):
    _out, cells, text, data = swept
    assert len(cells) == 18 and len(data["containers"]) == 18  # every run, not the first twelve
    for entry in data["containers"]:
        cpu, net = entry["figures"]
        workers = int(re.search(r"workers(\d)", entry["run"]).group(1))
        assert len(cpu["data"]) == len(net["data"]) == workers  # a line per container
        top = net["layout"]["yaxis"]["range"][1]
        assert top >= charts.MIN_MIB  # a worker alone moved bytes, not a chart scaled to a thousandth of a MiB
        if workers == 1:
            assert top == charts.MIN_MIB
    assert text.startswith("# Two axes: 1 vs 2 vs 3 containers\n")
    assert data["title"] == "Two axes: 1 vs 2 vs 3 containers"
    runs = {r["run"]: r for r in data["runs"]}
    one = runs[next(k for k in runs if k.startswith("workers1-samples3000-r0"))]
    assert one["text"]["train_seconds"] == sig(one["train_seconds"]) == "3.00"  # 3.0, not 3 nor 3.0000


def test_a_quick_sweeps_title_names_its_own_grid():
    exp = parse("name: q\nbase: {dataset: synthetic}\ngrid: {workers: [1, 2, 3]}\nquick: {workers: [1, 3]}\n"
                "report: {title: '{workers} containers, {samples} samples, {missing}'}\n")
    rows = [{"params": {"workers": w, "samples": s}} for w in (3, 1) for s in (60000, 5000)]
    assert report.title(exp, rows) == "1 vs 3 containers, 5000 vs 60000 samples, {missing}"
    assert report.title(parse("name: plain\nbase: {dataset: synthetic}\n"), rows) == "plain"


def test_text_from_a_run_reaches_plotly_escaped_and_the_json_block_cannot_be_closed(tmp_path):
    from orchestrator.analysis import html

    hostile = "</script><img src=x onerror=alert(1)>"
    run = {"run": hostile, "run_id": "x", "workers": 1, "n": 1, "train_seconds": 1.0, "curves": {"loss": [[1, 0.5]]},
           "system": {"cpu_percent": {hostile: [[0, 10.0]]}, "net_rx_mib": {hostile: [[0, 0.001]]}}}
    page = html.render(tmp_path / "r.html", hostile, hostile, [run], [], "containers", "workers", 2).read_text()
    assert page.count("</script>") == 3 and "<img" not in page  # the data block's, plotly.js's and report.js's
    data = page_data(page)
    [cpu, net] = data["containers"][0]["figures"]
    assert cpu["data"][0]["name"] == "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"
    assert cpu["layout"]["title"]["text"].startswith("&lt;/script&gt;") and data["title"] == hostile
    assert net["layout"]["yaxis"]["range"] == [0.0, charts.MIN_MIB]


def test_the_png_plots_have_the_repeats_ranges_and_whole_worker_ticks(swept, monkeypatch, tmp_path):
    from matplotlib.container import ErrorbarContainer

    from orchestrator.analysis import metrics, plots

    _out, cells, _text, _data = swept
    drawn = {}
    real_save = plots._save

    def keep(fig, path):
        ax = fig.axes[0]
        drawn[path.name] = ([float(t) for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]],
                            [c for c in ax.containers if isinstance(c, ErrorbarContainer) and c.has_yerr])
        return real_save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    rows = metrics.aggregate(cells)
    plots._plots(rows, ["samples"], "workers", tmp_path)
    for name in ("time-vs-workers.png", "accuracy-vs-workers.png"):
        ticks, ranged = drawn[name]
        assert ticks and all(t.is_integer() for t in ticks), (name, ticks)
        assert len(ranged) == 2, name  # a line per number of samples, each with its repeats' min–max
    plots._scaling_plots(rows, "workers", tmp_path, cores=2)
    for name in ("speedup.png", "efficiency.png", "training-comparison.png"):
        ticks, ranged = drawn[name]
        assert ticks and all(t.is_integer() for t in ticks) and ranged, name


def test_a_committed_sweeps_page_is_drawn_again_from_the_runs_it_holds_and_its_cells(swept, tmp_path):
    import shutil

    out, cells, _text, data = swept
    shutil.rmtree(out / "runs")  # as in a committed sweep: cells.json and the reports, no collected runs
    page = out / "report.html"
    page.write_text(page.read_text().replace('"net_mb": 2.0', '"net_mb": 0.0'))  # a figure as an older page held it
    said = []
    experiments.rewrite_report(parse(SWEEP), paths=Paths(runs=tmp_path / "runs", cache=tmp_path / "cache",
                                                         results=out.parent), say=said.append)
    assert any("report.html drawn again from the runs it holds" in line for line in said), said
    again = page_data(page.read_text())
    assert [r["run"] for r in again["runs"]] == [r["run"] for r in data["runs"]]
    assert again["sections"] == data["sections"] and again["containers"] == data["containers"]
    by_id = {c["run_id"]: c["summary"] for c in cells.values()}
    for run in again["runs"]:  # each run's own figures from its cell's summary
        assert run["net_mb"] == by_id[run["run_id"]]["net_bytes"] / 1e6
