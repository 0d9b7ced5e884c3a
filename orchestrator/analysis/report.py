"""An experiment's report.md: its tables, the machine it was measured on and links to its plots (``plots``).

Pure functions of data collected and aggregated elsewhere: this module reads no run and runs nothing.
The figures in the report come from ``metrics``; text a container chose is escaped (``safetext.markdown``).
report.md is written atomically (``safeio``): an interrupted or failed write leaves the old file whole.
"""
from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping

from orchestrator.analysis import metrics
from orchestrator.analysis.numbers import median_range, sig, with_unit
from orchestrator.analysis.plots import _line_of, _plots, _scaling_plots, _setup_label
from orchestrator.safeio import atomic_write
from orchestrator.safetext import markdown


def _scaling_section(rows: list[dict[str, Any]], axis: str, cells: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The scaling table (time, speedup, efficiency, throughput, accuracy per N and setup) and the step time
    split into compute and the all-reduce wait."""
    steps = {}
    for c in cells.values():
        workers = ((c.get("summary") or {}).get("workers") or [{}])
        spec = (c.get("summary") or {}).get("spec") or {}
        if workers[0].get("steps_per_epoch"):
            steps[metrics.point_id(c["params"])] = workers[0]["steps_per_epoch"] * int(
                spec.get("epochs", 1))
    lines = ["## Scaling", "",
             f"| {axis} | setup | global batch | train s | speedup | bound | efficiency | samples/s | test accuracy | "
             "compute ms/step | all-reduce wait ms/step | wait share |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    mixed = _mixed(rows)
    for r in sorted(rows, key=lambda r: (_line_of(r, axis), metrics.point_scale(r, axis))):
        total = steps.get(metrics.point_id(r["params"]))
        per_step = 1000 / total if total else None
        compute = r["compute_seconds"][0] * per_step if r["compute_seconds"] and per_step else None
        wait = r["allreduce_wait_seconds"][0] * per_step if r["allreduce_wait_seconds"] and per_step else None
        share = wait / (wait + compute) if wait is not None and compute else None
        lines.append("| " + " | ".join([
            str(metrics.point_scale(r, axis)), _line_of(r, axis), str(r["global_batch"] or "-"),
            median_range(r["train_seconds"]), median_range(r["speedup_range"]),
            _bound(r, mixed), median_range(r["efficiency_range"]),
            median_range(r["samples_per_second"]),
            median_range(r["test_accuracy"]),
            median_range(r["compute_seconds"], per_step) if per_step else "-",
            median_range(r["allreduce_wait_seconds"], per_step) if per_step else "-",
            "-" if share is None else f"{share:.0%}"]) + " |")
    return lines + ["", "Speedup is T(1)/T(N) against the same setup's one-process run; bound is the best speedup "
                    "this machine allows at equal work: T(1) over the floor measured beside the cell where the "
                    "experiment asks for it (`report: {floor: true}`, see the floor's section), else its cores over "
                    "the CPU the one-process run used (never more than N" + (", marked CPU" if mixed else "") +
                    "); efficiency is speedup / N; "
                    "samples/s is every worker's own samples over its own train time, summed. Figures are the median over "
                    "repeats with the min–max range in brackets; the speedup's range is each repeat's time against "
                    "the median one-process time. Compute is the "
                    "first worker's training steps less the time it waited for the gradients' all-reduce "
                    "(with PyTorch, the part backward could not overlap with computing; with MPI, the whole "
                    "blocking call), per step, where the trainer measures them.", ""]


def _measured_on(cells: Mapping[str, Mapping[str, Any]]) -> str:
    """Which machine the cells were measured on; a warning when they come from several, or from one orch did
    not record (cells of an older orch)."""
    from orchestrator.analysis import machine

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

    from orchestrator import __version__

    engine = "unknown"
    try:
        from orchestrator.docker.engine import Engine

        engine = Engine().info().get("ServerVersion", "unknown")
    except Exception:  # noqa: BLE001 - a report without the engine version is still a report
        pass
    return (f"{psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.1f} GiB memory, "
            f"{platform.system()} {platform.release()}, Docker engine {engine}, orch {__version__}")


def _parallel(rows: list[dict[str, Any]]) -> bool:
    """Whether some grid point runs in parallel (its N, ``metrics.aggregate``'s, above 1): only then has the table a
    speedup, and a bound on it."""
    return any(r.get("n", 1) > 1 for r in rows)


def _mixed(rows: list[dict[str, Any]]) -> bool:
    """Whether a table holds both kinds of bound, floors measured beside the cells and CPU bounds."""
    return {metrics.machine_bound(r)[1] for r in rows} >= {"floor", "cpu"}


def _bound(r: Mapping[str, Any], mixed: bool) -> str:
    """The bound of a row, marked as the CPU bound where others in the table are floors."""
    value, kind = metrics.machine_bound(r)
    return sig(value) + (" (CPU)" if mixed and kind == "cpu" else "")


def _results_table(rows: list[dict[str, Any]], axes: list[str], axis: str, named: bool = False) -> list[str]:
    """One line per grid point; speedup, the bound this machine allows and efficiency where some point runs in
    parallel (a sweep of one container and one replica, such as of batch sizes, compares times only)."""
    parallel = _parallel(rows)
    mixed = _mixed(rows)
    scaled = ["speedup", "bound", "efficiency"] if parallel else []
    heads = [*([axis] + axes), "runs", "test accuracy", "val loss", "val accuracy", "train s", "s per epoch", "wall s",
             "T/T(baseline)" if named else "T(N)/T(1)", *scaled, "CPU % per container", "network MB per worker"]
    lines = ["| " + " | ".join(heads) + " |", "|" + " --- |" * len(heads)]
    for r in rows:
        runs = f"{r['runs'] - r['failed']}/{r['runs']}" + (" (failed: " + str(r["failed"]) + ")" if r["failed"] else "")
        figures = [sig(r["speedup"]), _bound(r, mixed), sig(r["efficiency"])]
        lines.append("| " + " | ".join([
            str(metrics.point_scale(r, axis)), *(str(r["params"].get(a, "-")) for a in axes), runs,
            median_range(r["test_accuracy"]), median_range(r.get("val_loss")),
            median_range(r.get("val_accuracy")), median_range(r["train_seconds"]),
            median_range(r.get("epoch_seconds")), median_range(r["wall_seconds"]),
            with_unit(r["time_ratio"], "x"), *(figures if parallel else []),
            median_range(r["cpu_mean_percent"]), median_range(r["net_bytes_per_worker"], 1e-6),
        ]) + " |")
    return lines


def _results_note(rows: list[dict[str, Any]], axis: str, baseline: Mapping[str, Any]) -> str:
    """What the results table's columns are."""
    kinds = {metrics.machine_bound(r)[1] for r in rows} - {""}
    what = []
    if "floor" in kinds:
        what.append("T(1) over the floor measured beside the point (see the floor's section)")
    if "cpu" in kinds:
        what.append("its cores over the CPU the one-process run used (never more than N" +
                    (", marked CPU)" if "floor" in kinds else ")"))
    bound = f" Bound is the best speedup this machine allows: {' or '.join(what)}." if what else ""
    if baseline:
        text = ("T/T(baseline) is the median train time over that of the baseline "
                f"({_setup_label({'params': baseline})}), on the same data.")
        scaled = " Speedup is its inverse; efficiency is speedup / N, with N the workers times the replicas."
    else:
        text = (f"T(N)/T(1) is the median train time with N {axis} over that with one, on the same data: 1.0 means "
                "no cost for distributing.")
        scaled = " Speedup is T(1)/T(N); efficiency is speedup / N."
    text += scaled + bound if _parallel(rows) else \
        " Every point runs one container of one replica, so there is no speedup to bound."
    return text + (" Val loss and accuracy are after the last epoch; s per epoch is the mean epoch time. CPU is in "
                   "percent of one core per container. Network is bytes received plus sent by each worker.")


def _floor_section(rows: list[dict[str, Any]], axis: str) -> list[str]:
    """T(N) against the floor measured beside each cell (``experiments/floor.py``), or why a row has none."""
    lines = ["## Against this machine's floor", "",
             f"| {axis} | setup | T(N) s | T(N)/T(1) | compute floor s | transport floor s | floor s | T(N)/floor | "
             "best speedup T(1)/floor |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    notes = []
    for r in sorted(rows, key=lambda r: (_line_of(r, axis), metrics.point_scale(r, axis))):
        if not r["floor_seconds"]:
            if r.get("floor_note"):
                notes.append(f"- {metrics.point_scale(r, axis)} {axis}, {_line_of(r, axis)}: no floor: "
                             f"{markdown(r['floor_note'])}")
            continue
        lines.append("| " + " | ".join([
            str(metrics.point_scale(r, axis)), _line_of(r, axis), median_range(r["train_seconds"]),
            sig(r["time_ratio"]), median_range(r["compute_floor"]),
            median_range(r["transport_floor"]), median_range(r["floor_seconds"]),
            sig(r.get("vs_floor")), sig(r.get("floor_bound"))]) + " |")
    if len(lines) == 4 and not notes:
        return []
    return lines + ["", "The compute floor is one rank alone at the per-rank batch (global batch / N) on its shard, "
                    "so the same steps, pinned to the cores a rank of the cell gets, run right after the cell, times "
                    "the most ranks that share a core. The transport floor is the all-reduce p50 of the cell's "
                    "transport (`orch bench allreduce`) at N ranks and the gradients' size, times the steps. No "
                    "orch on these cores can train the cell in less than their sum, the floor: T(N)/floor is what "
                    "orch adds, and T(1)/floor the best speedup this machine allows. MirroredStrategy's replicas "
                    "count as ranks: the solo rank is one replica, and as replicas are threads of one process, not "
                    "pinned, its time counts the replicas over the cores; their reduction is in memory, with no "
                    "transport floor. "
                    "A point of one rank is its own floor (T/floor 1.00): the solo rank would be the same run.",
                    "", *notes,
                    *([""] if notes else [])]


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
            f"{sig(r['step_seconds'][0] * 1000)} ms against {sig(base['step_seconds'][0] * 1000)} ms {against}. "
            f"The same global batch means the same arithmetic per step, shared over the same cores, so the extra "
            f"{sig(r['sync_seconds_per_step'] * 1000)} ms ({r['sync_share']:.0%} of the step) is synchronisation: "
            f"exchanging the gradients (an all-reduce, or the parameter servers' reads and writes) and the wait "
            f"for the slowest replica."
            + (f" Each worker moved {sig(r['net_bytes_per_worker'][0] / 1e6)} MB." if r["net_bytes_per_worker"] else "")
        )
    larger = sum(1 for r in rows if r.get("same_work") is False)
    if why and larger:
        why.append(f"- {larger} grid points take a larger global batch than their baseline (a batch per worker), so "
                   "their steps do more arithmetic and the difference is not synchronisation alone; where the "
                   "workers time their all-reduce, the Scaling table above splits their steps.")
    return ["## Why", "", "Estimated from the measured step times (train time / steps):", "", *why, ""] if why else []


PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def title(experiment: Any, rows: list[dict[str, Any]]) -> str:
    """The report's title: the file's (its name if none), each ``{axis}`` in it the values the sweep ran on that
    axis (``{workers}``: "1 vs 3" for a sweep of 1 and 3), so that a quick sweep's title names its own grid; a name
    no row sets stays as written."""
    def values(match: re.Match[str]) -> str:
        found = {(type(v).__name__, str(v)): v for r in rows if (v := r["params"].get(match.group(1))) is not None}
        ordered = sorted(found.values(), key=lambda v: (not isinstance(v, (int, float)), v if isinstance(
            v, (int, float)) else str(v)))
        return " vs ".join(str(v) for v in ordered) if ordered else match.group(0)

    return PLACEHOLDER.sub(values, experiment.report.title or experiment.name)


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
    cores = metrics.cells_cores(cells) or os.cpu_count() or 1
    plots = _scaling_plots(rows, axis, out, cores) if scaling else _plots(rows, axes, axis, out, named=bool(baseline))
    spec_fields = next(iter(cells.values()))["fields"] if cells else {}
    lines = [f"# {title(experiment, rows)}", ""]
    if experiment.description:
        lines += [experiment.description.strip(), ""]
    lines += [
        f"- Report written on: {machine_description()}",
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
        "", _results_note(rows, axis, baseline), "",
    ]
    if scaling:
        lines += _scaling_section(rows, axis, cells)
    lines += _floor_section(rows, axis)
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    lines += _why(rows, axes, axis, baseline)
    if experiment.report.reference:
        lines += [f"## {experiment.report.reference_title or 'Reference'}", "",
                  "| setup | data | accuracy | time |", "| --- | --- | --- | --- |"]
        lines += [f"| {r.setup} | {r.data} | {with_unit(r.accuracy, '%')} | {with_unit(r.seconds, ' s')} |"
                  for r in experiment.report.reference]
        lines += [""]
    if experiment.report.notes:
        lines += [experiment.report.notes.strip(), ""]
    failed = {k: c for k, c in cells.items() if c.get("state") != "succeeded"}
    if failed:
        # An error can carry what a container chose (a contract version, an engine's reason): inert Markdown.
        lines += ["## Failed cells", ""] + [
            f"- `{k}` ({c.get('run_id')}): {markdown(str(c.get('error', c.get('state'))))}" for k, c in failed.items()
        ] + [""]
    lines += ["## Cells", "", "| cell | state | run | test accuracy | train s | wall s |", "| --- | --- | --- | --- | --- | --- |"]
    for key, c in cells.items():
        s = c.get("summary") or {}
        lines.append(f"| {key} | {c.get('state')} | {c.get('run_id')} | {sig(s.get('test_accuracy'))} | "
                     f"{sig(s.get('train_seconds'))} | {sig(s.get('wall_seconds'))} |")
    path = out / "report.md"
    atomic_write(path, "\n".join(lines) + "\n")
    return path
