"""`orch collect`: bring a run's results, events and stats together into files, tables and plots.

Runs are read through ``rundir`` only: the record, the replicas' events and results, their predictions.
A predictions.npz is a container's file: read bounded and checked (predictions.py), and skipped with a warning if it
is not sane. Every file is written atomically, with the output folder locked (``safeio``).
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from statistics import mean
from typing import Any, NamedTuple, Optional

from orchestrator.analysis import metrics, plots
from orchestrator.analysis.predictions import read_predictions
from orchestrator.errors import EXIT_FAILED, EXIT_USAGE, OrchError, RunNotFound
from orchestrator.paths import Paths, default_paths
from orchestrator.run.rundir import Key, RunDir, RunState, WorkerRecords, resolve
from orchestrator.run.stats import HOST_FILE, STATS_FILE, read_samples
from orchestrator.safeio import Unsafe, atomic_write, locked, write_json
from orchestrator.safetext import one_line

SUMMARY_SCHEMA_VERSION = 1
EPOCH_FIELDS = ["worker", "epoch", "loss", "accuracy", "val_loss", "val_accuracy", "seconds", "samples", "time",
                "compute_seconds", "allreduce_wait_seconds"]


class Collected(NamedTuple):
    """What ``summarize`` read of one run."""

    summary: dict[str, Any]
    epochs: list[dict[str, Any]]  # one row per replica whose figures are valid and epoch, EPOCH_FIELDS
    stats: list[dict[str, Any]]  # the rows of stats.csv
    workers: dict[Key, WorkerRecords]  # what each replica's records gave, judged alone
    keys: list[Key]  # the run's replicas


def _container_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {"stats_samples": 0, "cpu_mean_percent": None, "cpu_max_percent": None, "mem_max_bytes": None,
                "net_rx_bytes": None, "net_tx_bytes": None, "blk_read_bytes": None, "blk_write_bytes": None}
    # Network and block counters count from the container's start, so the last value is the total.
    return {
        "stats_samples": len(rows),
        "cpu_mean_percent": round(mean(r["cpu_percent"] for r in rows), 2),
        "cpu_max_percent": round(max(r["cpu_percent"] for r in rows), 2),
        "mem_max_bytes": max(r["mem_used_bytes"] for r in rows),
        "net_rx_bytes": max(r["net_rx_bytes"] for r in rows),
        "net_tx_bytes": max(r["net_tx_bytes"] for r in rows),
        "blk_read_bytes": max(r["blk_read_bytes"] for r in rows),
        "blk_write_bytes": max(r["blk_write_bytes"] for r in rows),
    }


def _epochs_of(got: WorkerRecords) -> list[dict[str, Any]]:
    """A replica's epoch rows: from its events, or from its result where it wrote no epoch events.

    The events hold every epoch of every attempt (a failed worker writes no result.json, and a restarted
    one's result lists only its last attempt); an epoch redone after a restart counts once, the last time.
    """
    rows = [got.epochs[n].model_dump() for n in sorted(got.epochs)] or (got.result.epochs if got.result else [])
    return [{"worker": got.key[1], **{f: e.get(f) for f in EPOCH_FIELDS if f != "worker"}} for e in rows]


def _samples(got: WorkerRecords, rows: list[dict[str, Any]]) -> list[Optional[int]]:
    """The samples of each epoch: the result's, else the epoch records' (None where one did not say)."""
    return list(got.result.samples_per_epoch if got.result and got.result.samples_per_epoch else
                [e["samples"] for e in rows])


def _rate(worker: dict[str, Any]) -> Optional[float]:
    """A worker's own samples over its own train time, if it said both."""
    samples, seconds = worker["samples_per_epoch"], worker["train_seconds"]
    if not seconds or not samples or any(n is None for n in samples):
        return None
    return float(sum(samples) / seconds)


def _dropped_line(got: WorkerRecords, epochs: int, marked: Optional[str]) -> Optional[str]:
    """What was left of a replica's records, in one line; None if nothing was."""
    parts = [f"{got.dropped:,} record(s) past the job's {epochs} epoch(s) dropped"] if got.dropped else []
    capped = got.capped or marked
    if capped:
        parts.append(capped)
    return f"{got.key[0]}-{got.key[1]}: " + "; ".join(parts) if parts else None


def summarize(run: RunDir) -> Collected:
    """The summary, epoch rows, stats rows and records of one run. Pure reading, no engine.

    Each replica is judged alone (``RunDir.worker_records``): one whose records fail has its figures marked invalid
    with the reason, the run's figures come from the others, and the summary says it is ``partial``."""
    info = run.record()
    if info is None:
        raise RunNotFound(f"{run.path} holds no run (no run record)")
    everyone = info.spec.replica_keys() if info.spec is not None else []
    keys = info.spec.reporting_keys() if info.spec is not None else []
    job_epochs = info.spec.epochs if info.spec is not None else 0
    stats = read_samples(run.path / STATS_FILE)
    recorded = {(w.get("role", "worker"), w.get("worker")): w for w in info.workers if isinstance(w, dict)}
    workers = {key: run.worker_records(key, job_epochs) for key in keys}
    epochs: list[dict[str, Any]] = []
    rows_of: dict[Key, list[dict[str, Any]]] = {}
    per_worker, warnings = [], []
    # Replicas that serve rather than train (ps's servers and workers): their cost, with no result.
    serving = [{"role": role, "worker": i, **_container_figures([r for r in stats if (r["role"], r["worker"]) == (role, i)])}
               for role, i in everyone if (role, i) not in keys]
    for key, got in workers.items():
        role, i = key
        result = got.result
        rows_of[key] = rows = _epochs_of(got)
        epochs += rows
        marked = (recorded.get(key) or {}).get("records_capped")
        if got.invalid is not None:
            warnings.append(f"{role}-{i}: its figures are invalid: {got.invalid}")
        dropped = _dropped_line(got, job_epochs, marked if isinstance(marked, str) else None)
        if dropped is not None:
            warnings.append(one_line(dropped, 400))
        per_worker.append({
            "role": role,
            "worker": i,
            "exit_code": (recorded.get(key) or {}).get("exit_code"),
            "invalid": got.invalid,
            "train_seconds": result.train_seconds if result else None,
            "test_accuracy": result.test_accuracy if result else None,
            "samples_per_epoch": _samples(got, rows),
            "steps_per_epoch": result.steps_per_epoch if result else None,
            "replicas": result.replicas if result else None,
            "records_dropped": got.dropped,
            "records_unread_bytes": got.unread,
            **_container_figures([r for r in stats if (r["role"], r["worker"]) == key]),
        })
    valid = [w for w in per_worker if w["invalid"] is None]
    train_times = [w["train_seconds"] for w in valid if w["train_seconds"] is not None]
    accuracies = [w["test_accuracy"] for w in valid if w["test_accuracy"] is not None]
    cpu_means = [w["cpu_mean_percent"] for w in per_worker + serving if w["cpu_mean_percent"] is not None]
    net = [w["net_rx_bytes"] + w["net_tx_bytes"] for w in per_worker + serving if w["net_rx_bytes"] is not None]
    # The curves are the first valid worker's: in sync training every replica agrees.
    first = rows_of[(valid[0]["role"], valid[0]["worker"])] if valid else []
    epoch_times = [e["seconds"] for e in first if e.get("seconds") is not None]
    # Throughput: every worker's own samples over its own train time, summed (measured, not assumed equal).
    rates = [rate for w in per_worker if (rate := _rate(w)) is not None and w["invalid"] is None]
    split = {name: round(sum(e[name] for e in first), 4) if first and all(e.get(name) is not None for e in first)
             else None for name in ("compute_seconds", "allreduce_wait_seconds")}
    summary = {
        "schema": SUMMARY_SCHEMA_VERSION,
        "run_id": info.run_id,
        "state": info.state.value,
        "failed": info.state != RunState.SUCCEEDED,
        "partial": len(valid) < len(per_worker),  # some worker's figures are invalid: the rest are the others'
        "error": info.error,
        "spec": info.spec.model_dump(mode="json") if info.spec is not None else {},
        "started": info.started,
        "wall_seconds": info.wall_seconds,
        "train_seconds": max(train_times) if train_times else None,
        "test_accuracy": accuracies[0] if accuracies else None,
        "epochs_completed": max((len(rows_of[(w["role"], w["worker"])]) for w in valid), default=0),
        "epoch_seconds": round(mean(epoch_times), 4) if epoch_times else None,
        "val_loss": first[-1].get("val_loss") if first else None,  # after the last epoch
        "val_accuracy": first[-1].get("val_accuracy") if first else None,
        "loss_curve": [e.get("loss") for e in first],  # the first valid worker's training loss per epoch
        "samples_per_second": round(sum(rates), 2) if rates and len(rates) == len(per_worker)
        and math.isfinite(sum(rates)) else None,  # finite: a train time of 1e-300 s is a number, not a rate
        **split,  # the first valid worker's, summed over its epochs, where its trainer measures them
        "cpu_mean_percent": round(mean(cpu_means), 2) if cpu_means else None,
        "net_bytes": sum(net) if net else None,
        "stats_samples": len(stats),
        "restarts": info.restarts,
        "workers": per_worker,
        "serving": serving,
        "warnings": warnings,  # one line each: invalid workers, dropped records, unreadable predictions
    }
    return Collected(summary, epochs, stats, workers, keys)  # an invalid worker's rows are none: it kept nothing


def _csv(fieldnames: list[str], rows: list[dict[str, Any]]) -> str:
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=fieldnames, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


def _plots(run: RunDir, out: Path, got: Collected) -> list[str]:
    summary, epochs, stats, workers, keys = got
    run_id = summary["run_id"]
    valid = [key for key in keys if workers[key].invalid is None]  # an invalid worker's claims are not drawn
    chief = valid[0] if valid else None
    start = summary.get("started") or (stats[0]["time"] if stats else 0.0)
    made = []
    if stats:
        ends = [workers[chief].epochs[n].time for n in sorted(workers[chief].epochs)] if chief else []
        made.append(plots.cpu_plot(stats, start, ends, f"CPU per container, run {run_id}", out / "cpu.png"))
        made.append(plots.network_plot(stats, start, f"Network per container, run {run_id}", out / "network.png"))
    chief_epochs = [e for e in epochs if chief is not None and e["worker"] == chief[1]]
    if chief_epochs:
        made.append(plots.training_plot(chief_epochs, f"Loss and accuracy, run {run_id}", out / "training.png"))
    for role, index in valid:
        try:
            predictions = read_predictions(run.predictions((role, index)))
        except Unsafe as exc:
            summary["warnings"].append(f"{role}-{index}: no prediction plot: {str(exc)[:200]}")
            continue
        if predictions is not None:
            made.append(plots.prediction_grid(*predictions, f"{role} {index}'s own predictions",
                                              out / f"predictions-{role}-{index}.png"))
    return [p.name for p in made]


class Failure(NamedTuple):
    """A run ``collect`` could not collect, and why, in one line."""

    run: str
    message: str
    exit_code: int


def _failure(run_id: Optional[str], exc: Exception) -> Failure:
    name = run_id if run_id is not None else "the newest run"
    if isinstance(exc, OrchError):
        return Failure(name, one_line(exc.message, 400), exc.exit_code)
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return Failure(name, one_line(f"cannot write its results: {exc.strerror or exc}{where}", 400), EXIT_USAGE)
    return Failure(name, one_line(f"internal error: {type(exc).__name__}: {exc}", 400), EXIT_FAILED)


def collect(run_ids: Optional[list[str]] = None, out_root: Optional[Path] = None,
            paths: Optional[Paths] = None, failures: Optional[list[Failure]] = None,
            plots: bool = True) -> list[dict[str, Any]]:
    """Write ``<out_root>/<run>/`` (summary.json, stats.csv, host.csv, epochs.csv, and the PNG plots unless
    ``plots`` is False) for each run.

    ``run_ids`` None means the newest run; ``out_root`` None means ``paths.results``. ``out_root`` is locked
    meanwhile (FolderBusy if another orch writes there); every file is written atomically, summary.json last.
    With ``failures`` (a list), a run that cannot be collected is added to it (``Failure``, one line) and the
    others are still collected; without, its error is raised.
    """
    paths = paths or default_paths()
    out_root = paths.results if out_root is None else Path(out_root)
    summaries = []
    wanted: list[Optional[str]] = list(run_ids) if run_ids else [None]
    with locked(out_root, "collect"):
        for run_id in wanted:
            try:
                summaries.append(_collect_one(resolve(paths, run_id), out_root, plots))
            except Exception as exc:  # noqa: BLE001 - one run that cannot be collected leaves the others collected
                if failures is None:
                    raise
                failures.append(_failure(run_id, exc))
    return summaries


def _collect_one(run: RunDir, out_root: Path, plots: bool = True) -> dict[str, Any]:
    got = summarize(run)
    summary = got.summary
    out = out_root / summary["run_id"]
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "epochs.csv", _csv(EPOCH_FIELDS, got.epochs))
    copied = []
    for name in (STATS_FILE, HOST_FILE):  # the host wrote these, not a container
        if (run.path / name).is_file():
            atomic_write(out / name, (run.path / name).read_bytes())
            copied.append(name)
    drawn = _plots(run, out, got) if plots else []
    summary["files"] = sorted(["summary.json", "epochs.csv", *copied, *drawn])
    summary["results_dir"] = str(out)
    write_json(out / "summary.json", summary)
    _views(out, summary)
    return summary


def _views(out: Path, summary: dict[str, Any]) -> None:
    """Views of what was just written, after summary.json and read back once: TensorBoard event files
    (``<out>/tensorboard``) and the interactive report (``<out>/report.html``). A failure of either is a warning
    collect prints, never the collect's: the results are written."""
    from orchestrator.analysis import html
    from orchestrator.tracking import figures, tensorboard

    def warn(what: str, exc: Exception) -> None:
        summary["warnings"] = [*summary.get("warnings", []), f"no {what}: {type(exc).__name__}: {exc}"]

    try:
        fig = figures.read(out)
    except Exception as exc:  # noqa: BLE001
        return warn("TensorBoard events or HTML report", exc)
    try:
        tensorboard.write(fig)
    except Exception as exc:  # noqa: BLE001
        warn("TensorBoard events", exc)
    try:
        html.write_figures(out / "report.html", f"orch run {summary['run_id']}", [(fig, None)])
    except Exception as exc:  # noqa: BLE001
        warn("HTML report", exc)


def compare(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per run, with time ratio, speedup and efficiency (``metrics.scaling``) against the 1-worker
    run of the same data, samples, epochs and global batch (``metrics.run_baseline``)."""
    index = metrics.run_baselines(summaries)
    rows = []
    for s in summaries:
        n = metrics.run_workers(s)
        base = metrics.run_baseline(s, index)
        t_n = s.get("train_seconds")
        rows.append({
            "run_id": s["run_id"],
            "state": s["state"],
            "partial": bool(s.get("partial")),
            "workers": n,
            "samples": (s.get("spec") or {}).get("samples"),
            "test_accuracy": s.get("test_accuracy"),
            "train_seconds": t_n,
            **metrics.scaling(t_n, base.get("train_seconds") if base else None, n).to_dict(),
            "cpu_mean_percent": s.get("cpu_mean_percent"),
            "net_mb": s["net_bytes"] / 1e6 if s.get("net_bytes") is not None else None,
        })
    return rows
