"""Plots of collected runs as PNG files, and an experiment's report.md.

Pure functions of data collected and aggregated elsewhere: this module reads no run and runs nothing.
The figures in the report come from ``metrics``; matplotlib (Agg backend) is imported on the first plot.
Every file is written atomically (``safeio``): an interrupted or failed write leaves the old file whole.
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from . import metrics
from .safeio import atomic_write, atomic_write_with


def _pyplot() -> Any:
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


def line_plot(series: dict[str, tuple[Sequence[float], Sequence[float]]], xlabel: str, ylabel: str, title: str,
              path: Path) -> Path:
    """One line per named (x, y) series."""
    fig, ax = _pyplot().subplots(figsize=(7, 4))
    for name, (x, y) in series.items():
        ax.plot(x, y, marker="o", label=name)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def bar_plot(values: dict[str, float], ylabel: str, title: str, path: Path) -> Path:
    """One bar per named value, in the given order."""
    fig, ax = _pyplot().subplots(figsize=(max(6, 1.3 * len(values)), 4))
    ax.bar(list(values), list(values.values()), color="tab:blue")
    ax.set(ylabel=ylabel, title=title)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def _line_of(row: Mapping[str, Any], axis: str) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(row["params"].items()) if k != axis) or "all"


def _scaling_plots(rows: list[dict[str, Any]], axis: str, out: Path) -> list[Path]:
    """The four figures of a scaling study: loss curves, speedup with the ideal line, efficiency, and a training
    comparison (train time and throughput against N)."""
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
    for metric, ylabel, ideal, name in (("speedup", "speedup T(1)/T(N)", lambda n: n, "speedup"),
                                        ("efficiency", "efficiency speedup/N", lambda n: 1.0, "efficiency")):
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot([1, top], [ideal(1), ideal(top)], linestyle="--", color="grey", label="ideal")
        for label, group in lines.items():
            points = [(metrics.point_scale(r, axis), *r[f"{metric}_range"]) for r in group if r[f"{metric}_range"]]
            if points:  # the median, with the repeats' min-max as the error bar
                n, med, lo, hi = zip(*points)
                ax.errorbar(n, med, yerr=[[m - a for m, a in zip(med, lo)], [b - m for m, b in zip(med, hi)]],
                            marker="o", capsize=3, label=label)
        ax.set(xlabel=axis, ylabel=ylabel, title=f"{name.capitalize()} against {axis}")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        paths.append(_save(fig, out / f"{name}.png"))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for label, group in lines.items():
        n = [metrics.point_scale(r, axis) for r in group]
        left.plot(n, [r["train_seconds"][0] for r in group], marker="o", label=label)
        if all(r["samples_per_second"] for r in group):
            right.plot(n, [r["samples_per_second"][0] for r in group], marker="o", label=label)
    left.set(xlabel=axis, ylabel="train time, s (median)", title="Training time")
    right.set(xlabel=axis, ylabel="samples per second (all workers)", title="Throughput")
    for ax in (left, right):
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    paths.append(_save(fig, out / "training-comparison.png"))
    return paths


def _scaling_section(rows: list[dict[str, Any]], axis: str, cells: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The scaling table (time, speedup, efficiency, throughput, accuracy per N and setup) and the step time
    split into compute and the all-reduce wait."""
    steps = {}
    for c in cells.values():
        workers = ((c.get("summary") or {}).get("workers") or [{}])
        spec = (c.get("summary") or {}).get("spec") or {}
        if workers[0].get("steps_per_epoch"):
            steps[json.dumps(c["params"], sort_keys=True, default=str)] = workers[0]["steps_per_epoch"] * int(
                spec.get("epochs", 1))
    lines = ["## Scaling", "",
             f"| {axis} | setup | global batch | train s | speedup | efficiency | samples/s | test accuracy | "
             "compute ms/step | all-reduce wait ms/step | wait share |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(rows, key=lambda r: (_line_of(r, axis), metrics.point_scale(r, axis))):
        total = steps.get(json.dumps(r["params"], sort_keys=True, default=str))
        per_step = 1000 / total if total else None
        compute = r["compute_seconds"][0] * per_step if r["compute_seconds"] and per_step else None
        wait = r["allreduce_wait_seconds"][0] * per_step if r["allreduce_wait_seconds"] and per_step else None
        share = wait / (wait + compute) if wait is not None and compute else None
        lines.append("| " + " | ".join([
            str(metrics.point_scale(r, axis)), _line_of(r, axis), str(r["global_batch"] or "-"),
            _median_range(r["train_seconds"], ".2f"), _median_range(r["speedup_range"], ".2f"),
            _median_range(r["efficiency_range"], ".2f"), _median_range(r["samples_per_second"], ".0f"),
            _median_range(r["test_accuracy"], ".4f"),
            _median_range(r["compute_seconds"], ".2f", per_step) if per_step else "-",
            _median_range(r["allreduce_wait_seconds"], ".2f", per_step) if per_step else "-",
            _opt(share, ".0%")]) + " |")
    return lines + ["", "Speedup is T(1)/T(N) against the same setup's one-process run; efficiency is speedup / N; "
                    "samples/s is every worker's own samples over its own train time, summed. Figures are the median over "
                    "repeats with the min–max range in brackets; the speedup's range is each repeat's time against "
                    "the median one-process time. Compute is the "
                    "first worker's training steps less the time backward waited for the gradients' all-reduce "
                    "(the part it could not overlap with computing), per step.", ""]


def _median_range(value: Optional[metrics.MedianRange], spec: str, scale: float = 1.0) -> str:
    if value is None:
        return "-"
    med, lo, hi = (v * scale for v in value)
    if lo == hi:
        return f"{med:{spec}}"
    return f"{med:{spec}} ({lo:{spec}}–{hi:{spec}})"


def _opt(value: Optional[float], spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _measured_on(cells: Mapping[str, Mapping[str, Any]]) -> str:
    """Which machine the cells were measured on; a warning when they come from several, or from one orch did
    not record (cells of an older orch)."""
    from . import machine

    measured = [c.get("machine") for c in cells.values() if c.get("state") == "succeeded"]  # failed: no figures
    found = {m["id"]: m for m in measured if isinstance(m, dict) and m.get("id")}
    unrecorded = sum(1 for m in measured if not (isinstance(m, dict) and m.get("id")))
    if not measured:
        return "- Measured on: no cell has succeeded"
    if len(found) == 1 and not unrecorded:
        return f"- Measured on: {machine.describe(next(iter(found.values())))}"
    if not found:
        return "- Measured on: a machine the cells do not record (they are from an older orch)"
    parts = [machine.describe(m) for m in found.values()] + (
        [f"{unrecorded} {'cell' if unrecorded == 1 else 'cells'} on an unrecorded one"] if unrecorded else [])
    return (f"- **Measured on {len(found) + bool(unrecorded)} machines** ({'; '.join(parts)}): figures across "
            "them are not comparable; run the sweep again on one machine to re-measure the others' cells")


def machine_description() -> str:
    """Cores, memory and versions of this host, for reports."""
    import platform

    import psutil

    from . import __version__

    engine = "unknown"
    try:
        from .engine import Engine

        engine = Engine().info().get("ServerVersion", "unknown")
    except Exception:  # noqa: BLE001 - a report without the engine version is still a report
        pass
    return (f"{psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.1f} GiB memory, "
            f"{platform.system()} {platform.release()}, Docker engine {engine}, orch {__version__}")


def _series(by_line: Mapping[str, list[dict[str, Any]]], metric: str,
            axis: str) -> dict[str, tuple[list[float], list[float]]]:
    """Per line of the plot, the median of ``metric`` against the scaling ``axis``."""
    out = {}
    for label, group in by_line.items():
        points = sorted((metrics.point_scale(r, axis), r[metric][0]) for r in group if r[metric])
        if points:
            out[label] = ([p[0] for p in points], [p[1] for p in points])
    return out


def _setup_label(row: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(row["params"].items()))


def _plots(rows: list[dict[str, Any]], axes: list[str], axis: str, out: Path, named: bool = False) -> list[Path]:
    if named:  # setups, not a scaling axis: one bar each
        timed = [r for r in rows if r["train_seconds"]]
        if not timed:
            return []
        return [bar_plot({_setup_label(r): r["train_seconds"][0] for r in timed}, "train time, s (median)",
                         "Train time per setup", out / "time-per-setup.png"),
                bar_plot({_setup_label(r): r["test_accuracy"][0] for r in timed if r["test_accuracy"]},
                         "test accuracy (median)", "Test accuracy per setup", out / "accuracy-per-setup.png")]
    by_line: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_line.setdefault(", ".join(f"{k} {r['params'][k]}" for k in axes if k in r['params']) or "all", []).append(r)
    if not any(r["train_seconds"] for r in rows):
        return []
    return [line_plot(_series(by_line, "train_seconds", axis), axis, "train time, s (median)", f"Time vs {axis}",
                      out / f"time-vs-{axis}.png"),
            line_plot(_series(by_line, "test_accuracy", axis), axis, "test accuracy (median)", f"Accuracy vs {axis}",
                      out / f"accuracy-vs-{axis}.png")]


def _results_table(rows: list[dict[str, Any]], axes: list[str], axis: str, named: bool = False) -> list[str]:
    lines = [
        "| " + " | ".join([*([axis] + axes), "runs", "test accuracy", "val loss", "val accuracy", "train s",
                          "s per epoch", "wall s", "T/T(baseline)" if named else "T(N)/T(1)",
                          "speedup", "efficiency", "CPU % per container", "network MB per worker"]) + " |",
        "|" + " --- |" * (len(axes) + 13),
    ]
    for r in rows:
        runs = f"{r['runs'] - r['failed']}/{r['runs']}" + (" (failed: " + str(r["failed"]) + ")" if r["failed"] else "")
        lines.append("| " + " | ".join([
            str(metrics.point_scale(r, axis)), *(str(r["params"].get(a, "-")) for a in axes), runs,
            _median_range(r["test_accuracy"], ".4f"), _median_range(r.get("val_loss"), ".4f"),
            _median_range(r.get("val_accuracy"), ".4f"), _median_range(r["train_seconds"], ".2f"),
            _median_range(r.get("epoch_seconds"), ".2f"), _median_range(r["wall_seconds"], ".1f"), _opt(r["time_ratio"], ".2f", "x"), _opt(r["speedup"], ".3f"),
            _opt(r["efficiency"], ".3f"), _median_range(r["cpu_mean_percent"], ".0f"),
            _median_range(r["net_bytes_per_worker"], ".1f", 1e-6),
        ]) + " |")
    return lines


def _why(rows: list[dict[str, Any]], axes: list[str], axis: str, baseline: Mapping[str, Any]) -> list[str]:
    """One line per grid point with a synchronisation cost: its step time against its baseline's."""
    index = metrics.point_baselines(rows, axis)
    named = metrics.named_baseline(rows, baseline) if baseline else None
    one = axis[:-1] if axis.endswith("s") else axis
    why = []
    for r in rows:
        base = named if baseline else metrics.point_baseline(r, index, axis)
        if r.get("sync_share") is None or base is None or not base["step_seconds"]:
            continue
        label = ", ".join(f"{a} {r['params'][a]}" for a in axes if a in r['params'])
        against = f"the baseline's ({_setup_label({'params': baseline})})" if baseline else f"with one {one}"
        why.append(
            f"- **{metrics.point_scale(r, axis)} {axis}{', ' + label if label else ''}:** a training step takes "
            f"{r['step_seconds'][0] * 1000:.1f} ms against {base['step_seconds'][0] * 1000:.1f} ms {against}. "
            f"The same global batch means the same arithmetic per step, shared over the same cores, so the extra "
            f"{r['sync_seconds_per_step'] * 1000:.1f} ms ({r['sync_share']:.0%} of the step) is synchronisation: "
            f"exchanging the gradients (an all-reduce, or the parameter servers' reads and writes) and the wait "
            f"for the slowest replica."
            + (f" Each worker moved {r['net_bytes_per_worker'][0] / 1e6:.1f} MB." if r["net_bytes_per_worker"] else "")
        )
    larger = sum(1 for r in rows if r.get("same_work") is False)
    if why and larger:
        why.append(f"- {larger} grid points take a larger global batch than their baseline (a batch per worker), so "
                   "their steps do more arithmetic and the difference is not synchronisation alone; where the "
                   "workers time their all-reduce, the Scaling table above splits their steps.")
    return ["## Why", "", "Estimated from the measured step times (train time / steps):", "", *why, ""] if why else []


def write_experiment_report(experiment: Any, quick: bool, cells: Mapping[str, Mapping[str, Any]],
                            rows: list[dict[str, Any]], out: Path) -> Path:
    """Write report.md and its plots into ``out``.

    ``experiment`` is an ``experiments.Experiment`` (name, description, report options); ``cells`` its
    recorded cells (cells.json); ``rows`` those cells aggregated by ``metrics.aggregate``.
    """
    axis = getattr(experiment.report, "scale", metrics.SCALE)
    baseline = dict(getattr(experiment.report, "baseline", {}) or {})
    axes = sorted({k for r in rows for k in r["params"]} - {axis})
    scaling = bool(getattr(experiment.report, "scaling", False))
    plots = _scaling_plots(rows, axis, out) if scaling else _plots(rows, axes, axis, out, named=bool(baseline))
    spec_fields = next(iter(cells.values()))["fields"] if cells else {}
    lines = [f"# {experiment.report.title or experiment.name}", ""]
    if experiment.description:
        lines += [experiment.description.strip(), ""]
    lines += [
        f"- Machine: {machine_description()}",
        _measured_on(cells),
        f"- Written: {datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}"
        + (" — **quick mode** (`--quick`): scaled down, for a demo, not for conclusions" if quick else ""),
        "- Fixed for every cell: " + ", ".join(f"{k} {v}" for k, v in sorted(spec_fields.items())
                                                if k not in rows[0]["params"]) if rows else "- No cells ran.",
        f"- Cells: {len(cells)} runs over {len(rows)} grid points; figures are the median over repeats, "
        "with the min–max range in brackets.",
        "",
        "## Results",
        "",
        *_results_table(rows, axes, axis, named=bool(baseline)),
        "", (f"T/T(baseline) is the median train time over that of the baseline ({_setup_label({'params': baseline})}), "
             "on the same data. Speedup is its inverse; efficiency is speedup / N, with N the workers times "
             "the replicas." if baseline else
             f"T(N)/T(1) is the median train time with N {axis} over that with one, on the same data: "
             "1.0 means no cost for distributing. Speedup is T(1)/T(N); efficiency is speedup / N.")
        + " Val loss and accuracy are after the last epoch; s per epoch is the mean epoch time. CPU is in "
        "percent of one core per container. Network is bytes received plus sent by each worker.", "",
    ]
    if scaling:
        lines += _scaling_section(rows, axis, cells)
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    lines += _why(rows, axes, axis, baseline)
    if experiment.report.reference:
        lines += [f"## {experiment.report.reference_title or 'Reference'}", "",
                  "| setup | data | accuracy | time |", "| --- | --- | --- | --- |"]
        lines += [f"| {r.setup} | {r.data} | {_opt(r.accuracy, '.2f', '%')} | {_opt(r.seconds, '.2f', ' s')} |"
                  for r in experiment.report.reference]
        lines += [""]
    if experiment.report.notes:
        lines += [experiment.report.notes.strip(), ""]
    failed = {k: c for k, c in cells.items() if c.get("state") != "succeeded"}
    if failed:
        lines += ["## Failed cells", ""] + [f"- `{k}` ({c.get('run_id')}): {c.get('error', c.get('state'))}"
                                            for k, c in failed.items()] + [""]
    lines += ["## Cells", "", "| cell | state | run | test accuracy | train s | wall s |", "| --- | --- | --- | --- | --- | --- |"]
    for key, c in cells.items():
        s = c.get("summary") or {}
        lines.append(f"| {key} | {c.get('state')} | {c.get('run_id')} | {_opt(s.get('test_accuracy'), '.4f')} | "
                     f"{_opt(s.get('train_seconds'), '.2f')} | {_opt(s.get('wall_seconds'), '.1f')} |")
    path = out / "report.md"
    atomic_write(path, "\n".join(lines) + "\n")
    return path
