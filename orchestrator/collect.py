"""`orch collect`: bring a run's results, events and stats together into files, tables and plots."""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from statistics import mean
from typing import Any, Optional

from . import contract
from .errors import RunNotFound
from .paths import Paths, default_paths
from .runs import RUN_FILE, EventTailer, read_json, resolve_run
from .stats import HOST_FILE, STATS_FILE, read_samples

SUMMARY_SCHEMA_VERSION = 1
EPOCH_FIELDS = ["worker", "epoch", "loss", "accuracy", "val_loss", "val_accuracy", "seconds", "samples", "time"]


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


def summarize(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(summary, epoch rows, stats rows, events) of one run directory. Pure reading, no Docker."""
    record = read_json(run_dir / RUN_FILE)
    if not isinstance(record, dict):
        raise RunNotFound(f"{run_dir} holds no run (no {RUN_FILE})")
    spec = record.get("spec") or {}
    workers = int(spec.get("workers", 0))
    stats = read_samples(run_dir / STATS_FILE)
    epochs: list[dict[str, Any]] = []
    per_worker = []
    events = EventTailer(run_dir, workers).read()
    recorded = {w.get("worker"): w for w in record.get("workers") or []}
    for i in range(workers):
        result = read_json(run_dir / contract.worker_dir(i) / contract.RESULT_FILE) or {}
        worker_epochs = [e for e in events if e.get("worker") == i and e.get("event") == contract.EVENT_EPOCH]
        # The events hold every epoch of every attempt (a failed worker writes no result.json, and a
        # restarted one's result lists only its last attempt); an epoch redone after a restart counts once.
        by_epoch = {e.get("epoch"): e for e in worker_epochs}
        for e in sorted(by_epoch.values(), key=lambda e: e.get("epoch") or 0) or result.get("epochs") or []:
            epochs.append({"worker": i, **{k: e.get(k) for k in EPOCH_FIELDS if k != "worker"}})
        figures = _container_figures([r for r in stats if r["worker"] == i])
        per_worker.append({
            "worker": i,
            "exit_code": (recorded.get(i) or {}).get("exit_code"),
            "train_seconds": result.get("train_seconds"),
            "test_accuracy": result.get("test_accuracy"),
            "samples_per_epoch": result.get("samples_per_epoch") or [e.get("samples") for e in worker_epochs],
            "steps_per_epoch": result.get("steps_per_epoch"),
            "replicas": result.get("replicas"),
            **figures,
        })
    train_times = [w["train_seconds"] for w in per_worker if w["train_seconds"] is not None]
    accuracies = [w["test_accuracy"] for w in per_worker if w["test_accuracy"] is not None]
    cpu_means = [w["cpu_mean_percent"] for w in per_worker if w["cpu_mean_percent"] is not None]
    net = [w["net_rx_bytes"] + w["net_tx_bytes"] for w in per_worker if w["net_rx_bytes"] is not None]
    summary = {
        "schema": SUMMARY_SCHEMA_VERSION,
        "run_id": record.get("run_id"),
        "state": record.get("state"),
        "failed": record.get("state") != "succeeded",
        "error": record.get("error"),
        "spec": spec,
        "started": record.get("started"),
        "wall_seconds": record.get("wall_seconds"),
        "train_seconds": max(train_times) if train_times else None,
        "test_accuracy": accuracies[0] if accuracies else None,
        "epochs_completed": max((len([e for e in epochs if e["worker"] == w]) for w in range(workers)), default=0),
        "cpu_mean_percent": round(mean(cpu_means), 2) if cpu_means else None,
        "net_bytes": sum(net) if net else None,
        "stats_samples": len(stats),
        "restarts": record.get("restarts") or [],
        "workers": per_worker,
    }
    return summary, epochs, stats, events


def _write_csv(path: Path, fieldnames: list[str], rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fieldnames, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _plots(run_dir: Path, out: Path, summary: dict[str, Any], epochs: list[dict[str, Any]],
           stats: list[dict[str, Any]], events: list[dict[str, Any]]) -> list[str]:
    import numpy as np

    from . import report

    run_id = summary["run_id"]
    start = summary.get("started") or (stats[0]["time"] if stats else 0.0)
    made = []
    if stats:
        ends = [e["time"] for e in events if e.get("event") == contract.EVENT_EPOCH and e.get("worker") == 0]
        made.append(report.cpu_plot(stats, start, ends, f"CPU per container, run {run_id}", out / "cpu.png"))
        made.append(report.network_plot(stats, start, f"Network per container, run {run_id}", out / "network.png"))
    chief = [e for e in epochs if e["worker"] == 0]
    if chief:
        made.append(report.training_plot(chief, f"Loss and accuracy, run {run_id}", out / "training.png"))
    for w in range(int(summary["spec"].get("workers", 0))):
        path = run_dir / contract.worker_dir(w) / contract.PREDICTIONS_FILE
        if path.is_file():
            with np.load(path) as grid:
                made.append(report.prediction_grid(grid["x"], grid["y_true"], grid["y_pred"],
                                                   f"worker {w}'s own predictions", out / f"predictions-worker-{w}.png"))
    return [p.name for p in made]


def collect(run_ids: Optional[list[str]] = None, out_root: Path = Path("results"),
            paths: Optional[Paths] = None) -> list[dict[str, Any]]:
    """Write ``results/<run>/`` (summary.json, stats.csv, host.csv, epochs.csv, plots) for each run."""
    paths = paths or default_paths()
    summaries = []
    for run_id in run_ids or [resolve_run(None, paths)]:
        run_dir = paths.runs / resolve_run(run_id, paths)
        summary, epochs, stats, events = summarize(run_dir)
        out = out_root / summary["run_id"]
        out.mkdir(parents=True, exist_ok=True)
        _write_csv(out / "epochs.csv", EPOCH_FIELDS, epochs)
        for name in (STATS_FILE, HOST_FILE):
            if (run_dir / name).is_file():
                shutil.copyfile(run_dir / name, out / name)
        summary["files"] = sorted(["summary.json", "epochs.csv", *[n for n in (STATS_FILE, HOST_FILE)
                                                                      if (out / n).is_file()],
                                   *_plots(run_dir, out, summary, epochs, stats, events)])
        summary["results_dir"] = str(out)
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        summaries.append(summary)
    return summaries


def compare(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per run, with time ratio, speedup and efficiency against a 1-worker run of the same data.

    As in seed 002: speedup = T(1) / T(N), efficiency = speedup / N. The time ratio T(N) / T(1) is
    the figure seed 000 reported (its 4.33x).
    """
    def key(s: dict[str, Any]) -> tuple:
        spec = s["spec"]
        return spec.get("dataset"), spec.get("samples"), spec.get("epochs"), spec.get("global_batch")

    baselines = {key(s): s for s in summaries
                 if s["spec"].get("workers") == 1 and not s["failed"] and s["train_seconds"]}
    rows = []
    for s in summaries:
        n = int(s["spec"].get("workers", 0))
        base = baselines.get(key(s))
        t1, tn = (base or {}).get("train_seconds"), s.get("train_seconds")
        ratio = tn / t1 if t1 and tn else None
        rows.append({
            "run_id": s["run_id"],
            "state": s["state"],
            "workers": n,
            "samples": s["spec"].get("samples"),
            "test_accuracy": s.get("test_accuracy"),
            "train_seconds": tn,
            "time_ratio": ratio,
            "speedup": 1 / ratio if ratio else None,
            "efficiency": 1 / ratio / n if ratio and n else None,
            "cpu_mean_percent": s.get("cpu_mean_percent"),
            "net_mb": s["net_bytes"] / 1e6 if s.get("net_bytes") is not None else None,
        })
    return rows
