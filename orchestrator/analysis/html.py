"""An interactive HTML report of a run, a set of runs or an experiment: one self-contained file.

No CDN and no library: the data is a JSON block in the page, and a few hundred lines of plain JavaScript
(``report.js``, shipped in the package) draw SVG charts and a sortable table, so the file opens offline and is
small enough to mail (its size is printed). Everything shown comes from the results folders `orch collect`
wrote (``tracking.figures`` reads and checks them); text is escaped by the browser's textContent, never
parsed as HTML.

Charts: the loss and accuracy curves of every run overlaid; for several runs, train time, speedup and
efficiency against N with two bounds drawn: the core limit, min(N, the host's cores), which no N workers sharing
those cores can pass (not N×), and the bound this machine allows: T(1) over the floor
measured beside each run where an experiment asked for it (``experiments/floor.py``), else the CPU bound (its
cores over the cores one worker used, measured, so N workers cannot beat min(N, that)); per-container CPU and
network timelines.
"""
from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any, Iterable, Optional

from orchestrator.analysis import metrics
from orchestrator.contract import finite
from orchestrator.safeio import atomic_write
from orchestrator.tracking import figures as read_figures

COLUMNS = [("run", "run"), ("state", "state"), ("framework", "framework"), ("strategy", "strategy"),
           ("n", "N"), ("train_seconds", "train s"), ("wall_seconds", "wall s"),
           ("test_accuracy", "test acc"), ("time_ratio", "T(N)/T(1)"), ("speedup", "speedup"), ("bound", "bound"),
           ("efficiency", "efficiency"), ("samples_per_second", "samples/s"), ("cpu_mean_percent", "mean CPU %"),
           ("net_mb", "network MB"), ("floor_seconds", "floor s"), ("vs_floor", "T(N)/floor")]


def _run(fig: read_figures.RunFigures, label: Optional[str] = None) -> dict[str, Any]:
    s = fig.summary
    curves: dict[str, list[list[float]]] = {}
    system: dict[str, dict[str, list[list[float]]]] = {}
    for p in _thinned(fig.series):
        if p.name.startswith("system/"):
            _, who, name = p.name.split("/", 2)
            system.setdefault(name, {}).setdefault(who, []).append([p.step, p.value])
        elif "/" not in p.name:
            curves.setdefault(p.name, []).append([p.step, p.value])
    net = s.get("net_bytes")
    return {"run": label or fig.run_id, "run_id": fig.run_id, "state": s.get("state"),
            "framework": fig.tags.get("framework"), "strategy": fig.tags.get("strategy"),
            "workers": metrics.run_workers(s), **{k: s.get(k) for k in (
                "train_seconds", "wall_seconds", "test_accuracy", "samples_per_second", "cpu_mean_percent")},
            "net_mb": round(net / 1e6, 1) if isinstance(net, (int, float)) else None,
            "curves": curves, "system": system}


MAX_POINTS = 2000  # per series in the page: a day of samples a second is thinned to every 44th


def _thinned(series: list[Any]) -> list[Any]:
    """The points of each named series, every k-th where there are more than MAX_POINTS, the last kept."""
    by_name: dict[str, list[Any]] = {}
    for p in series:
        by_name.setdefault(p.name, []).append(p)
    out = []
    for points in by_name.values():
        k = -(-len(points) // MAX_POINTS)
        out += points[::k] + ([points[-1]] if (len(points) - 1) % k else [])
    return out


Against = dict[str, tuple[int, Optional[float], Optional[float]]]  # run id: (N, T(1), the CPU bound)


def _with_scaling(rows: list[dict[str, Any]], summaries: list[dict[str, Any]],
                  floors: Optional[dict[str, float]] = None, against: Optional[Against] = None) -> None:
    """Each row's N, time ratio, speedup and efficiency against the 1-worker run of the same work (or what
    ``against`` gives, by run id: an experiment's own N and baseline), and the bound this machine allows it: T(1)
    over its floor (``floors``, by run id), else the CPU bound."""
    index = metrics.run_baselines(summaries)
    for row, summary in zip(rows, summaries):
        if against is not None:
            row["n"], t_1, row["cpu_bound"] = against.get(row["run_id"], (row["workers"], None, None))
        else:
            base = metrics.run_baseline(summary, index)
            row["n"], t_1 = row["workers"], (base or {}).get("train_seconds")
            row["cpu_bound"] = metrics.cpu_bound(row["workers"], (base or {}).get("cpu_mean_percent"))
        row.update(metrics.scaling(summary.get("train_seconds"), t_1, row["n"]).to_dict())
        row["floor_seconds"] = (floors or {}).get(row["run_id"])
        row["vs_floor"] = metrics.time_ratio(summary.get("train_seconds"), row["floor_seconds"])
        row["floor_bound"] = metrics.speedup(row["floor_seconds"], t_1)
        row["bound"], row["bound_kind"] = metrics.machine_bound(row)


def _columns(runs: list[dict[str, Any]], axis: Optional[str]) -> list[tuple[str, str]]:
    """The table's columns: no speedup, bound or efficiency where no run is parallel (nothing to speed up), and
    the time ratio against the baseline where the runs are setups against a named one (``axis`` None)."""
    parallel = any((r.get("n") or 0) > 1 for r in runs)
    return [(key, "T/T(baseline)" if key == "time_ratio" and axis is None else name) for key, name in COLUMNS
            if parallel or key not in ("speedup", "bound", "efficiency")]


def write(out: Path, title: str, folders: Iterable[tuple[Path, Optional[str]]], note: str = "",
          floors: Optional[dict[str, float]] = None, against: Optional[Against] = None,
          axis: Optional[str] = "containers") -> Path:
    """Write ``out`` (an .html file) for the runs collected into ``folders`` ((folder, label) pairs); ``floors``:
    the floor measured beside a run, by run id (an experiment's ``report: {floor: true}``); ``against``: each
    run's N, T(1) and CPU bound as its experiment reckons them; ``axis``: what N counts in the charts against it,
    None for none (an experiment of setups against a named one)."""
    return write_figures(out, title, [(read_figures.read(folder), label) for folder, label in folders], note, floors,
                         against, axis)


def core_limit(ns: Iterable[Any], cores: int) -> list[list[int]]:
    """The speedup no N workers on ``cores`` cores can pass, at each N of the charts: min(N, cores)."""
    return [[n, min(n, cores)] for n in sorted({n for n in ns if isinstance(n, int) and n > 0})]


def write_figures(out: Path, title: str, figures: list[tuple[read_figures.RunFigures, Optional[str]]],
                  note: str = "", floors: Optional[dict[str, float]] = None, against: Optional[Against] = None,
                  axis: Optional[str] = "containers", cores: Optional[int] = None) -> Path:
    """``write`` for runs already read (``tracking.figures.read``), each with its label; ``cores``: the host's
    (this one's unless given), for the core limit."""
    runs = [_run(fig, label) for fig, label in figures]
    _with_scaling(runs, [fig.summary for fig, _ in figures], floors, against)
    cores = cores or os.cpu_count() or 1
    data = {"title": title, "note": note, "columns": _columns(runs, axis), "runs": runs, "cores": cores,
            "core_limit": core_limit((r.get("n") for r in runs), cores), "axis": axis}
    script = (Path(__file__).parent / "report.js").read_text()
    # As JSON text inside <script>: no <, > or & at all, so nothing in it can end or comment the element.
    blob = json.dumps(finite(data), default=str, allow_nan=False).replace("<", "\\u003c").replace(">", "\\u003e") \
        .replace("&", "\\u0026")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.4em; }} h2 {{ font-size: 1.1em; margin-top: 1.6em; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 1em; }}
figure {{ margin: 0; }} figcaption {{ font-weight: 600; margin-bottom: .3em; }}
table {{ border-collapse: collapse; }} th, td {{ padding: .25em .6em; border-bottom: 1px solid #ddd; text-align: right; }}
th {{ cursor: pointer; background: #f4f4f4; user-select: none; }} td:first-child, th:first-child {{ text-align: left; }}
.note {{ color: #555; max-width: 60em; }} svg text {{ font-size: 11px; fill: #333; }}
</style></head>
<body><h1 id="title"></h1><p class="note" id="note"></p>
<h2>Runs</h2><table id="table"></table>
<div id="charts"></div>
<script type="application/json" id="data">{blob}</script>
<script>{script}</script>
</body></html>
"""
    atomic_write(out, page)
    return out
