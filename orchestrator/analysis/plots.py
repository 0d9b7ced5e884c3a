"""PNG plots: one run's CPU, network, training and predictions, and the figures of an experiment's report."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from orchestrator.analysis import metrics
from orchestrator.safeio import atomic_write_with


def _pyplot() -> Any:
    """matplotlib on the Agg backend, imported on the first plot: importing this module stays cheap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _per_container(stats: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    series: dict[str, list[dict[str, Any]]] = {}
    for row in stats:
        series.setdefault(row["container"], []).append(row)
    return {name: sorted(rows, key=lambda r: r["time"]) for name, rows in sorted(series.items())}


def _save(fig: Any, path: Path) -> Path:
    try:
        fig.tight_layout()
        atomic_write_with(path, lambda f: fig.savefig(f, format="png", dpi=110))
    finally:
        _pyplot().close(fig)
    return path


def cpu_plot(stats: Sequence[dict[str, Any]], start: float, epoch_ends: Sequence[float], title: str, path: Path) -> Path:
    """CPU % (100 = one core) per container over time, with the epoch boundaries marked."""
    fig, ax = _pyplot().subplots(figsize=(9, 4))
    for name, rows in _per_container(stats).items():
        ax.plot([r["time"] - start for r in rows], [r["cpu_percent"] for r in rows], label=name, linewidth=1.4)
    for i, t in enumerate(epoch_ends):
        ax.axvline(t - start, color="grey", linestyle="--", linewidth=0.8)
        ax.text(t - start, ax.get_ylim()[1] * 0.97, f" e{i + 1}", color="grey", fontsize=8, va="top")
    ax.set(xlabel="seconds since the run started", ylabel="CPU % (100 = one core)", title=title)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def network_plot(stats: Sequence[dict[str, Any]], start: float, title: str, path: Path) -> Path:
    """Network throughput (received plus sent) per container over time."""
    fig, ax = _pyplot().subplots(figsize=(9, 4))
    for name, rows in _per_container(stats).items():
        t = np.array([r["time"] for r in rows])
        total = np.array([r["net_rx_bytes"] + r["net_tx_bytes"] for r in rows], dtype=float)
        if len(t) < 2:
            continue
        rate = np.diff(total) / np.maximum(np.diff(t), 1e-6) / 1e6
        ax.plot(t[1:] - start, rate, label=name, linewidth=1.4)
    ax.set(xlabel="seconds since the run started", ylabel="MB/s (rx + tx)", title=title)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def training_plot(epochs: Sequence[dict[str, Any]], title: str, path: Path) -> Path:
    """Loss and accuracy per epoch, training and validation."""
    fig, (loss_ax, acc_ax) = _pyplot().subplots(1, 2, figsize=(9, 3.6))
    x = [e["epoch"] for e in epochs]
    for key, ax in (("loss", loss_ax), ("accuracy", acc_ax)):
        ax.plot(x, [e.get(key) for e in epochs], marker="o", label=f"train {key}")
        ax.plot(x, [e.get(f"val_{key}") for e in epochs], marker="s", label=f"validation {key}")
        ax.set(xlabel="epoch", ylabel=key)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    return _save(fig, path)


def prediction_grid(images: np.ndarray, truth: np.ndarray, predicted: np.ndarray, title: str, path: Path) -> Path:
    """A grid of test images with this worker's own predictions; wrong ones in red."""
    count = len(images)
    cols = min(5, count) or 1
    rows = max(1, -(-count // cols))
    fig, axes = _pyplot().subplots(rows, cols, figsize=(cols * 1.6, rows * 1.8))
    for ax, i in zip(np.atleast_1d(axes).ravel(), range(rows * cols)):
        ax.axis("off")
        if i >= count:
            continue
        ax.imshow(images[i].reshape(28, 28), cmap="gray_r")
        wrong = int(predicted[i]) != int(truth[i])
        ax.set_title(f"pred {int(predicted[i])} / true {int(truth[i])}", fontsize=8, color="red" if wrong else "black")
    fig.suptitle(title)
    return _save(fig, path)


def whole_ticks(ax: Any) -> None:
    """Ticks at whole numbers only on ``ax``'s x axis: a count of workers or replicas has no 1.25."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


Series = tuple[Sequence[float], ...]  # (x, y), or (x, y, low, high): the repeats' min and max as error bars


def line_plot(series: Mapping[str, Series], xlabel: str, ylabel: str, title: str, path: Path,
              dotted: Optional[dict[str, str]] = None, whole_x: bool = False) -> Path:
    """One line per named series; those named in ``dotted`` (bounds, not measurements) dotted, each in the colour
    of the series it names; a series with a low and a high per point has them as error bars; ``whole_x``: ticks at
    whole numbers."""
    dotted = dotted or {}
    fig, ax = _pyplot().subplots(figsize=(7, 4))
    colours = {name: f"C{i}" for i, name in enumerate(n for n in series if n not in dotted)}
    for name, (x, y, *span) in series.items():
        colour = colours.get(dotted[name], "grey") if name in dotted else colours[name]
        bars = [[m - lo for m, lo in zip(y, span[0])], [hi - m for m, hi in zip(y, span[1])]] if span else None
        ax.errorbar(x, y, yerr=bars, marker="." if name in dotted else "o", label=name,
                    linestyle=":" if name in dotted else "-", color=colour, capsize=3 if bars else 0)
    if whole_x:
        whole_ticks(ax)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def bar_plot(values: dict[str, float], ylabel: str, title: str, path: Path,
             marks: Optional[dict[str, float]] = None, mark_label: str = "") -> Path:
    """One bar per named value, in the given order; ``marks`` (a bound per bar) as a line across its bar."""
    fig, ax = _pyplot().subplots(figsize=(max(6, 1.3 * len(values)), 4))
    ax.bar(range(len(values)), list(values.values()), color="tab:blue")
    ax.set_xticks(range(len(values)), [name.replace(", ", "\n") for name in values])  # a setup's parts, one a line
    marked = [(i, marks[name]) for i, name in enumerate(values) if marks and name in marks]
    if marked:
        xs, ys = zip(*marked)
        ax.hlines(ys, [x - 0.4 for x in xs], [x + 0.4 for x in xs], colors="black", linestyles="dashed",
                  label=mark_label)
        ax.legend(fontsize=8)
    ax.set(ylabel=ylabel, title=title)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


FLOOR_LABEL = "this machine's floor (measured beside it)"


def _line_of(row: Mapping[str, Any], axis: str) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(row["params"].items()) if k != axis) or "all"


def _setup_label(row: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(row["params"].items()))


def core_limit(n: int, cores: int) -> float:
    """The best speedup N workers can have on ``cores`` cores at equal work: N, until they share the cores."""
    return float(min(n, cores))


def _scaling_plots(rows: list[dict[str, Any]], axis: str, out: Path, cores: int) -> list[Path]:
    """The four figures of a scaling study: loss curves, speedup and efficiency against the limit this machine's
    ``cores`` set (not N×, which would need N cores) and the floor where measured, and a training comparison (train
    time and throughput against N)."""
    plt = _pyplot()
    timed = [r for r in rows if r["train_seconds"]]
    if not timed:
        return []
    lines: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(timed, key=lambda r: metrics.point_scale(r, axis)):
        lines.setdefault(_line_of(r, axis), []).append(r)
    paths = []
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, group in lines.items():
        for r in group:
            if r["loss_curve"]:
                ax.plot(range(1, len(r["loss_curve"]) + 1), r["loss_curve"], marker=".",
                        label=f"N={metrics.point_scale(r, axis)}, {label}")
    ax.set(xlabel="epoch", ylabel="training loss (all workers)", title="Loss curves of every world size")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    paths.append(_save(fig, out / "loss-curves.png"))
    top = max(metrics.point_scale(r, axis) for r in timed)
    ns = sorted({metrics.point_scale(r, axis) for r in timed} | {1, top})
    for metric, ylabel, ideal, name in (("speedup", "speedup T(1)/T(N)", lambda n: core_limit(n, cores), "speedup"),
                                        ("efficiency", "efficiency speedup/N", lambda n: core_limit(n, cores) / n,
                                         "efficiency")):
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(ns, [ideal(n) for n in ns], linestyle="--", color="grey",
                label=f"core limit: {cores} cores (N× would need N)")
        for label, group in lines.items():
            points = [(metrics.point_scale(r, axis), *r[f"{metric}_range"]) for r in group if r[f"{metric}_range"]]
            if points:  # the median, with the repeats' min-max as the error bar
                n, med, lo, hi = zip(*points)
                bar = ax.errorbar(n, med, yerr=[[m - a for m, a in zip(med, lo)], [b - m for m, b in zip(med, hi)]],
                                  marker="o", capsize=3, label=label)
                bound = [(metrics.point_scale(r, axis), *metrics.machine_bound(r)) for r in group
                         if metrics.machine_bound(r)[0]]
                if bound:  # what this machine allows: T(1) over the floor measured beside the cell, else its
                    # cores over the CPU one worker of this line used
                    xs, bounds, kinds = zip(*bound)
                    ys = list(bounds) if metric == "speedup" else [b / x for x, b in zip(xs, bounds)]
                    what = "floor" if set(kinds) == {"floor"} else "cores" if set(kinds) == {"cpu"} else "floor or cores"
                    ax.plot(xs, ys, linestyle=":", color=bar[0].get_color(),
                            label=f"this machine's bound ({what}), {label}")
        ax.set(xlabel=axis, ylabel=ylabel, title=f"{name.capitalize()} against {axis}")
        whole_ticks(ax)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        paths.append(_save(fig, out / f"{name}.png"))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for label, group in lines.items():
        scale = [metrics.point_scale(r, axis) for r in group]
        line = left.errorbar(scale, [r["train_seconds"][0] for r in group], yerr=_bars(group, "train_seconds"),
                             marker="o", capsize=3, label=label)
        floored = [(x, r["floor_seconds"][0]) for x, r in zip(scale, group) if r.get("floor_seconds")]
        if floored:  # the floor measured beside each point, in the line's colour
            left.plot(*zip(*floored), marker=".", linestyle=":", color=line[0].get_color(),
                      label=f"{FLOOR_LABEL}, {label}")
        if all(r["samples_per_second"] for r in group):
            right.errorbar(scale, [r["samples_per_second"][0] for r in group], yerr=_bars(group, "samples_per_second"),
                           marker="o", capsize=3, label=label)
    left.set(xlabel=axis, ylabel="train time, s (median, min–max of repeats)", title="Training time")
    right.set(xlabel=axis, ylabel="samples per second (all workers)", title="Throughput")
    for ax in (left, right):
        whole_ticks(ax)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    paths.append(_save(fig, out / "training-comparison.png"))
    return paths


def _bars(group: list[dict[str, Any]], metric: str) -> list[list[float]]:
    """The repeats' min and max of ``metric`` about each row's median, as matplotlib's yerr."""
    return [[r[metric][0] - r[metric][1] for r in group], [r[metric][2] - r[metric][0] for r in group]]


def _series(by_line: Mapping[str, list[dict[str, Any]]], metric: str, axis: str) -> dict[str, Series]:
    """Per line of the plot, the median of ``metric`` against the scaling ``axis``, with the repeats' min and max."""
    out: dict[str, Series] = {}
    for label, group in by_line.items():
        points = sorted((metrics.point_scale(r, axis), *r[metric]) for r in group if r.get(metric))
        if points:
            out[label] = tuple([float(p[i]) for p in points] for i in range(4))
    return out


def _plots(rows: list[dict[str, Any]], axes: list[str], axis: str, out: Path, named: bool = False) -> list[Path]:
    """Train time and test accuracy per setup (``named``: bars) or against the scaling ``axis`` (lines); the
    train time's figure draws the floor measured beside each point where the experiment asked for it."""
    if named:  # setups, not a scaling axis: one bar each
        timed = [r for r in rows if r["train_seconds"]]
        if not timed:
            return []
        floors = {_setup_label(r): r["floor_seconds"][0] for r in timed if r.get("floor_seconds")}
        return [bar_plot({_setup_label(r): r["train_seconds"][0] for r in timed}, "train time, s (median)",
                         "Train time per setup", out / "time-per-setup.png", marks=floors, mark_label=FLOOR_LABEL),
                bar_plot({_setup_label(r): r["test_accuracy"][0] for r in timed if r["test_accuracy"]},
                         "test accuracy (median)", "Test accuracy per setup", out / "accuracy-per-setup.png")]
    by_line: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_line.setdefault(", ".join(f"{k} {r['params'][k]}" for k in axes if k in r['params']) or "all", []).append(r)
    if not any(r["train_seconds"] for r in rows):
        return []
    times = _series(by_line, "train_seconds", axis)
    floors = _series(by_line, "floor_seconds", axis)
    bounds = {(f"{FLOOR_LABEL}, {label}" if len(by_line) > 1 else FLOOR_LABEL): label for label in floors}
    return [line_plot({**times, **{name: floors[label] for name, label in bounds.items()}}, axis,
                      "train time, s (median, min–max of repeats)", f"Time vs {axis}", out / f"time-vs-{axis}.png",
                      dotted=bounds, whole_x=True),
            line_plot(_series(by_line, "test_accuracy", axis), axis, "test accuracy (median, min–max of repeats)",
                      f"Accuracy vs {axis}", out / f"accuracy-vs-{axis}.png", whole_x=True)]
