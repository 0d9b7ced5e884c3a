"""An interactive HTML report of a run, a set of runs or an experiment: one self-contained file.

The charts are Plotly's: plotly.js is inlined in the page (about 4.6 MiB, from the plotly package), so the file opens
offline, and its charts have hover values, zoom and legend toggles. Their figures are computed in Python
(``charts``) and the page holds them, with the data they come from, as a JSON block; ``report.js`` draws them and a
sortable table. Everything shown comes from the results folders `orch collect` wrote (``tracking.figures`` reads
and checks them); text is set by the browser's textContent, or escaped for Plotly, never parsed as HTML. Numbers
are written as report.md writes them (``numbers.sig``).

Charts: the loss and accuracy curves of every run overlaid; for several N, train time, speedup and efficiency
against N, each a line per combination of the sweep's other axes, the median of a grid point's repeats with their
min–max as error bars, and two bounds drawn: the core limit, min(N, the host's cores), which no N workers sharing
those cores can pass (not N×), and the bound this machine allows: T(1) over the floor measured beside each run
where an experiment asked for it (``experiments/floor.py``), else the CPU bound (its cores over the cores one
worker used, measured, so N workers cannot beat min(N, that)); for setups against a named one, their train times;
and every run's per-container CPU and network timelines, one run at a time.
"""
from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Optional

from orchestrator.analysis import charts, metrics
from orchestrator.analysis.charts import core_limit
from orchestrator.analysis.numbers import sig
from orchestrator.contract import finite
from orchestrator.errors import OrchError
from orchestrator.safeio import atomic_write, read_bounded
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
    return {"run": label or fig.run_id, "run_id": fig.run_id, "framework": fig.tags.get("framework"),
            "strategy": fig.tags.get("strategy"), **_figures_of(s), "curves": curves, "system": system}


def _figures_of(s: dict[str, Any]) -> dict[str, Any]:
    """A run's own figures in the table, from its summary."""
    net = s.get("net_bytes")
    return {"state": s.get("state"), "workers": metrics.run_workers(s), **{k: s.get(k) for k in (
        "train_seconds", "wall_seconds", "test_accuracy", "samples_per_second", "cpu_mean_percent")},
        "net_mb": net / 1e6 if isinstance(net, (int, float)) and not isinstance(net, bool) else None}


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
          axis: Optional[str] = "containers", rows: Optional[list[dict[str, Any]]] = None,
          scale: str = metrics.SCALE) -> Path:
    """Write ``out`` (an .html file) for the runs collected into ``folders`` ((folder, label) pairs); ``floors``:
    the floor measured beside a run, by run id (an experiment's ``report: {floor: true}``); ``against``: each
    run's N, T(1) and CPU bound as its experiment reckons them; ``axis``: what N counts in the charts against it,
    None for none (an experiment of setups against a named one); ``rows``: the experiment's grid points as report.md
    aggregates them (``metrics.aggregate`` along ``scale``), which the charts against N draw."""
    return write_figures(out, title, [(read_figures.read(folder), label) for folder, label in folders], note, floors,
                         against, axis, rows=rows, scale=scale)


def rows_of(figures: list[tuple[read_figures.RunFigures, Optional[str]]],
            floors: Optional[dict[str, float]] = None) -> list[dict[str, Any]]:
    """Runs compared outside an experiment as ``metrics.aggregate`` rows: a point per N workers and per value of
    the work (data set, samples, epochs, global batch) where the runs differ in it, the runs of one its repeats."""
    specs = [fig.summary.get("spec") or {} for fig, _ in figures]
    varying = [k for k in ("dataset", "samples", "epochs", "global_batch") if len({str(s.get(k)) for s in specs}) > 1]
    cells = {}
    for (fig, _label), spec in zip(figures, specs):
        summary, workers = fig.summary, metrics.run_workers(fig.summary)
        ok = summary.get("state") == "succeeded" and not summary.get("partial") and not summary.get("failed")
        floor = (floors or {}).get(fig.run_id)
        cells[fig.run_id] = {"params": {"workers": workers, **{k: spec.get(k) for k in varying}},
                             "fields": {"workers": workers}, "state": "succeeded" if ok else "failed",
                             "summary": summary,
                             **({"floor": {"floor": floor, "compute_floor": floor, "transport_floor": 0.0}}
                                if floor else {})}
    return metrics.aggregate(cells)


def write_figures(out: Path, title: str, figures: list[tuple[read_figures.RunFigures, Optional[str]]],
                  note: str = "", floors: Optional[dict[str, float]] = None, against: Optional[Against] = None,
                  axis: Optional[str] = "containers", cores: Optional[int] = None,
                  rows: Optional[list[dict[str, Any]]] = None, scale: str = metrics.SCALE) -> Path:
    """``write`` for runs already read (``tracking.figures.read``), each with its label; ``cores``: the host's
    (this one's unless given), for the core limit; ``rows`` None: the runs' own (``rows_of``)."""
    runs = [_run(fig, label) for fig, label in figures]
    _with_scaling(runs, [fig.summary for fig, _ in figures], floors, against)
    if rows is None:
        rows, scale = rows_of(figures, floors), metrics.SCALE
    return render(out, title, note, runs, rows, axis, scale, cores or os.cpu_count() or 1)


def _plotly_js() -> str:
    """plotly.js, minified, as the plotly package ships it: inlined, so the page opens offline."""
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


def render(out: Path, title: str, note: str, runs: list[dict[str, Any]], rows: list[dict[str, Any]],
           axis: Optional[str], scale: str, cores: int) -> Path:
    """Write the page of ``runs`` (``_run`` rows with their scaling) and ``rows`` (grid points, as report.md
    aggregates them): the table, the charts and the data they are drawn from, in one file."""
    columns = _columns(runs, axis)
    for r in runs:  # the table's text, written as report.md writes numbers; the values stay, for sorting
        r["text"] = {key: sig(r.get(key), none="–") for key, _ in columns}
    sections = [("Training curves, per epoch", charts.curves(runs))]
    if axis:
        sections.append((f"Against the number of {axis}", charts.against_n(rows, scale, axis, cores)))
    else:
        sections.append(("Per setup", charts.per_setup(rows)))
    data = {"title": title, "note": note, "columns": columns, "runs": runs, "rows": rows, "cores": cores,
            "core_limit": core_limit((r.get("n") for r in rows), cores), "axis": axis, "scale": scale,
            "sections": [{"title": head, "figures": figs} for head, figs in sections if figs],
            "containers": [{"run": r["run"], "figures": charts.per_container(r)} for r in runs]}
    # As JSON text inside <script>: no <, > or & at all, so nothing in it can end or comment the element.
    blob = json.dumps(finite(data), default=str, allow_nan=False).replace("<", "\\u003c").replace(">", "\\u003e") \
        .replace("&", "\\u0026")
    script = (Path(__file__).parent / "report.js").read_text()
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.4em; }} h2 {{ font-size: 1.1em; margin-top: 1.6em; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }}
.chart {{ border: 1px solid #eee; }}
table {{ border-collapse: collapse; }} th, td {{ padding: .25em .6em; border-bottom: 1px solid #ddd; text-align: right; }}
th {{ cursor: pointer; background: #f4f4f4; user-select: none; }} td:first-child, th:first-child {{ text-align: left; }}
.note {{ color: #555; max-width: 60em; }} label {{ font-weight: 600; }} select {{ margin: 0 0 .8em .5em; }}
</style></head>
<body><h1 id="title"></h1><p class="note" id="note"></p>
<h2>Runs</h2><table id="table"></table>
<div id="charts"></div>
<script type="application/json" id="data">{blob}</script>
<script>{_plotly_js()}</script>
<script>{script}</script>
</body></html>
"""
    atomic_write(out, page)
    return out


MAX_PAGE = 64 << 20  # bytes of a report read back to draw it again
DATA_BLOCK = re.compile(r'<script type="application/json" id="data">(.*?)</script>', re.S)


def embedded(page: Path) -> dict[str, Any]:
    """The data block of a report this module wrote (any version of it); OrchError if it holds none."""
    raw = read_bounded(page, MAX_PAGE)
    found = DATA_BLOCK.search(raw.decode("utf-8", "replace")) if raw is not None else None
    try:
        data = json.loads(found.group(1)) if found else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise OrchError(f"{page} holds no report data to draw again")
    return data


def rerender(page: Path, title: str, note: str, rows: list[dict[str, Any]], axis: Optional[str], scale: str,
             cores: Optional[int] = None, summaries: Optional[dict[str, dict[str, Any]]] = None) -> Path:
    """Draw ``page`` again as this orch draws it, from the runs it embeds (their curves, timelines and scaling as
    they were reckoned; their own figures from ``summaries``, by run id, where given) and ``rows`` (the grid
    points, from the cells recorded beside it): for a sweep whose collected runs are gone, as a committed one's
    are."""
    data = embedded(page)
    runs = []
    for r in data["runs"]:
        if isinstance(r, dict) and isinstance(r.get("run"), str):
            summary = (summaries or {}).get(str(r.get("run_id")))
            runs.append({**{k: v for k, v in r.items() if k != "text"},
                         **(_figures_of(summary) if isinstance(summary, dict) else {})})
    known = data.get("cores")
    return render(page, title, note, runs, rows, axis, scale,
                  cores or (known if isinstance(known, int) and known > 0 else None) or os.cpu_count() or 1)
