"""The interactive report's charts, as Plotly figures (plain JSON-able dicts) that plotly.js draws in the page.

Computed here, not in the page, so that every plotted point is checkable without a browser and every number a
reader hovers over is written by ``numbers.sig``, as report.md writes it. Against N, a point is a grid point of the
aggregation report.md tabulates (``metrics.aggregate``): the median over its repeats with their min–max as the
error bar, one line per combination of the sweep's other axes. Every text plotly.js shows is escaped here, since it
reads tags (``<b>``, ``<br>``) in its text: a value from a run can only ever be shown, never parsed.
"""
from __future__ import annotations

import html
import math
from typing import Any, Iterable, Mapping, Optional, Sequence

from orchestrator.analysis import metrics
from orchestrator.analysis.numbers import median_range, sig

Figure = dict[str, Any]
GREY, RED = "#7f7f7f", "#d62728"
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"]  # no grey, no red
HOVER = "%{hovertext}<extra></extra>"
MIN_MIB = 1.0  # the network charts' least range: a worker alone moves next to nothing, not a chart of noise
MIN_CPU = 100.0  # the CPU charts': one core


def text(value: Any) -> str:
    """``value`` as text plotly.js shows as it is: <, > and & escaped, so no tag in it is ever read."""
    return html.escape(str(value), quote=False)


def layout(title: str, xtitle: str, ytitle: str, traces: int, whole_x: Optional[Sequence[int]] = None,
           y_range: Optional[list[float]] = None) -> dict[str, Any]:
    """A chart's layout: its legend below the plot, the chart tall enough for every entry of it (none cut off);
    ``whole_x``: the ticks of an axis of whole numbers (N workers), at those values only."""
    xaxis: dict[str, Any] = {"title": {"text": text(xtitle)}, "zeroline": False, "automargin": True}
    if whole_x:
        xaxis.update(tickmode="array", tickvals=list(whole_x), ticktext=[str(n) for n in whole_x])
    yaxis: dict[str, Any] = {"title": {"text": text(ytitle)}, "rangemode": "tozero", "automargin": True}
    if y_range:
        yaxis["range"] = y_range
    return {"title": {"text": text(title), "font": {"size": 15}, "x": 0.02, "xanchor": "left"}, "xaxis": xaxis,
            "yaxis": yaxis, "width": 560, "height": 340 + 22 * traces, "hovermode": "closest", "showlegend": True,
            "modebar": {"orientation": "v"}, "margin": {"l": 64, "r": 40, "t": 48, "b": 40},
            "legend": {"orientation": "h", "yanchor": "top", "y": -0.18, "x": 0, "font": {"size": 11}}}


def _least_range(values: Iterable[float], least: float) -> list[float]:
    """[0, top]: a little above the largest value, and at least ``least``."""
    top = max((v for v in values), default=0.0)
    return [0.0, max(least, top * 1.08)]


def _series(name: str, xs: list[Any], ys: list[float], hover: list[str], **style: Any) -> dict[str, Any]:
    return {"type": "scatter", "mode": "lines+markers", "name": text(name), "x": xs, "y": ys,
            "hovertext": [text(h) for h in hover], "hovertemplate": HOVER, **style}


def _ranged(name: str, points: list[tuple[int, Sequence[float]]], what: str, unit: str = "",
            **style: Any) -> dict[str, Any]:
    """A line of medians with their repeats' min–max as error bars; ``points``: (N, (median, min, max))."""
    xs = [n for n, _ in points]
    meds = [v[0] for _, v in points]
    bar_style = style.pop("error_y", {})
    trace = _series(name, xs, meds, [f"{name}, N {n}: {what} {median_range(v)}{unit}" for n, v in points], **style)
    trace["error_y"] = {"type": "data", "symmetric": False, "array": [v[2] - v[0] for _, v in points],
                        "arrayminus": [v[0] - v[1] for _, v in points], "thickness": 1.2, "width": 4, **bar_style}
    return trace


def _labelled(name: str, label: Optional[str], xs: list[Any], ys: list[float], color: str,
              hover: list[str]) -> dict[str, Any]:
    """A bound: a dashed line in ``color``, named in the legend, and with ``label`` (if any) written at its last
    point."""
    trace = _series(name, xs, ys, hover, mode="lines", line={"dash": "dash", "color": color, "width": 1.6})
    if label:
        trace.update(mode="lines+text", text=[""] * (len(xs) - 1) + [text(label)], textposition="top left",
                     textfont={"color": color, "size": 11})
    return trace


def core_limit(ns: Iterable[Any], cores: int) -> list[list[int]]:
    """The speedup no N workers on ``cores`` cores can pass, at each N of the charts: min(N, cores)."""
    return [[n, min(n, cores)] for n in sorted({n for n in ns if isinstance(n, int) and n > 0})]


def line_of(row: Mapping[str, Any], scale: str) -> str:
    """A grid point's line: its values of every axis but the scaling one, or "all"."""
    return ", ".join(f"{k} {v}" for k, v in sorted(row["params"].items()) if k != scale) or "all"


def against_n(rows: list[dict[str, Any]], scale: str, axis: str, cores: int) -> list[Figure]:
    """Train time, speedup and efficiency against N (``rows``: ``metrics.aggregate``'s, along ``scale``), one line
    per combination of the other axes, with the floor measured beside each point, the bound this machine allows
    and the core limit min(N, ``cores``) as labelled lines. None where the rows hold one N."""
    timed = [r for r in rows if r.get("train_seconds")]
    ns = sorted({int(r["n"]) for r in timed})
    if len(ns) < 2:
        return []
    lines: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(timed, key=lambda r: int(r["n"])):
        lines.setdefault(line_of(r, scale), []).append(r)
    alone = len(lines) == 1
    title = f"{axis} N"
    time_traces: list[dict[str, Any]] = []
    speed: list[dict[str, Any]] = []
    eff: list[dict[str, Any]] = []
    for i, (label, group) in enumerate(lines.items()):
        name, color = "measured" if alone else label, COLORS[i % len(COLORS)]
        solid: dict[str, Any] = {"line": {"color": color}, "marker": {"color": color}, "error_y": {"color": color}}
        time_traces.append(_ranged(name, [(int(r["n"]), r["train_seconds"]) for r in group], "train time", " s",
                                   **solid))
        floored = [(int(r["n"]), r["floor_seconds"]) for r in group if r.get("floor_seconds")]
        if floored:
            floor_name = "this machine's floor" + ("" if alone else f", {label}")
            time_traces.append(_ranged(floor_name, floored, "floor", " s", line={"dash": "dot", "color": color},
                                       marker={"color": color, "symbol": "diamond"}))
        speed.append(_ranged(name, [(int(r["n"]), r["speedup_range"]) for r in group if r.get("speedup_range")],
                             "speedup", **solid))
        eff.append(_ranged(name, [(int(r["n"]), r["efficiency_range"]) for r in group if r.get("efficiency_range")],
                           "efficiency", **solid))
        bounds = [(int(r["n"]), float(b), kind) for r in group for b, kind in [metrics.machine_bound(r)] if b]
        if bounds:
            kinds = {k for _, _, k in bounds}
            what = "floor" if kinds == {"floor"} else "cores" if kinds == {"cpu"} else "floor or cores"
            bound_name = f"bound ({what})" + ("" if alone else f", {label}")
            xs, ys = [n for n, _, _ in bounds], [b for _, b, _ in bounds]
            tone, shown = (RED, bound_name) if alone else (color, None)  # one label a line: no text over text
            speed.append(_labelled(bound_name, shown, xs, ys, tone,
                                   [f"{bound_name}, N {n}: {sig(b)}" for n, b in zip(xs, ys)]))
            eff.append(_labelled(bound_name + " / N", shown, xs, [b / n for n, b in zip(xs, ys)], tone,
                                 [f"{bound_name} / N, N {n}: {sig(b / n)}" for n, b in zip(xs, ys)]))
    limit = f"core limit: min(N, {cores} cores)"
    limits = [float(limit) for _, limit in core_limit(ns, cores)]
    speed.append(_labelled(limit, "core limit", ns, limits, GREY, [f"{limit}, N {n}: {sig(v)}" for n, v in zip(ns, limits)]))
    eff.append(_labelled(limit + " / N", "core limit", ns, [v / n for n, v in zip(ns, limits)], GREY,
                         [f"{limit} / N, N {n}: {sig(v / n)}" for n, v in zip(ns, limits)]))
    return [{"data": t, "layout": layout(head, title, ytitle, len(t), ns)} for head, ytitle, t in (
        ("Train time (median, min–max of repeats)", "seconds", time_traces),
        ("Speedup T(1)/T(N)", "speedup", speed),
        ("Efficiency speedup/N", "efficiency", eff))]


def per_setup(rows: list[dict[str, Any]]) -> list[Figure]:
    """Train time per setup (an experiment against a named baseline): a bar each, the repeats' min–max as its error
    bar, and the floor measured beside it where there is one."""
    timed = [r for r in rows if r.get("train_seconds")]
    if not timed:
        return []
    names = [text(", ".join(f"{k} {v}" for k, v in r["params"].items()) or "all") for r in timed]
    bars = {"type": "bar", "name": "train time", "x": names, "y": [r["train_seconds"][0] for r in timed],
            "error_y": {"type": "data", "symmetric": False,
                        "array": [r["train_seconds"][2] - r["train_seconds"][0] for r in timed],
                        "arrayminus": [r["train_seconds"][0] - r["train_seconds"][1] for r in timed]},
            "hovertext": [f"{n}: {median_range(r['train_seconds'])} s" for n, r in zip(names, timed)],
            "hovertemplate": HOVER}
    traces = [bars]
    floored = [(n, r["floor_seconds"]) for n, r in zip(names, timed) if r.get("floor_seconds")]
    if floored:
        traces.append({"type": "scatter", "mode": "markers", "name": "this machine's floor",
                       "x": [n for n, _ in floored], "y": [v[0] for _, v in floored],
                       "marker": {"symbol": "line-ew-open", "size": 28, "color": "black", "line": {"width": 2}},
                       "hovertext": [f"{n}: floor {median_range(v)} s" for n, v in floored], "hovertemplate": HOVER})
    return [{"data": traces, "layout": {**layout("Train time per setup (median, min–max of repeats)", "setup",
                                                 "seconds", len(traces)), "width": max(560, 120 * len(timed))}}]


def curves(runs: list[dict[str, Any]]) -> list[Figure]:
    """Loss and accuracy per epoch, every run overlaid."""
    out = []
    for name, label in (("loss", "training loss"), ("accuracy", "training accuracy"),
                        ("val_accuracy", "validation accuracy")):
        traces = [_series(r["run"], [p[0] for p in points], [p[1] for p in points],
                          [f"{r['run']}, epoch {p[0]}: {sig(p[1])}" for p in points])
                  for r in runs if (points := (r.get("curves") or {}).get(name))]
        if traces:
            out.append({"data": traces, "layout": layout(label, "epoch", label, len(traces),
                                                         sorted({x for t in traces for x in t["x"]}))})
    return out


def per_container(run: Mapping[str, Any]) -> list[Figure]:
    """One run's CPU and network (received plus sent) per container over time; the axes never narrower than one
    core and MIN_MIB."""
    system = run.get("system") or {}
    cpu, rx, tx = (system.get(k) or {} for k in ("cpu_percent", "net_rx_mib", "net_tx_mib"))
    out = []
    cpu_traces = [_series(who, [p[0] for p in cpu[who]], [p[1] for p in cpu[who]],
                          [f"{who}, {p[0]} s: {sig(p[1])}%" for p in cpu[who]], mode="lines") for who in sorted(cpu)]
    if cpu_traces:
        out.append({"data": cpu_traces, "layout": layout(f"{run['run']}: CPU", "seconds", "% of one core",
                                                         len(cpu_traces), None,
                                                         _least_range((v for t in cpu_traces for v in t["y"]), MIN_CPU))})
    net_traces = []
    for who in sorted(rx):
        sent = {p[0]: p[1] for p in tx.get(who) or []}
        points = [(t, v + sent.get(t, 0.0)) for t, v in rx[who]]
        net_traces.append(_series(who, [t for t, _ in points], [v for _, v in points],
                                  [f"{who}, {t} s: {sig(v)} MiB" for t, v in points], mode="lines"))
    if net_traces:
        values = [v for t in net_traces for v in t["y"] if math.isfinite(v)]
        out.append({"data": net_traces, "layout": layout(f"{run['run']}: network received + sent", "seconds",
                                                         "MiB", len(net_traces), None, _least_range(values, MIN_MIB))})
    return out
