"""A run's figures as trackers log them, read from its results folder (what `orch collect` wrote).

Every value is checked as it is read: a number must be finite, a name one of orch's, so a results folder
that was tampered with logs nothing it should not.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from orchestrator.errors import OrchError
from orchestrator.safeio import read_bounded

MAX_FILE = 64 << 20  # bytes of one CSV or summary.json read back
EPOCH_METRICS = ("loss", "accuracy", "val_loss", "val_accuracy", "seconds", "compute_seconds",
                 "allreduce_wait_seconds")
# The run's own figures (step 0); the last epoch's validation figures are the per-epoch series' last values.
RUN_METRICS = ("train_seconds", "wall_seconds", "samples_per_second", "test_accuracy", "epoch_seconds",
               "cpu_mean_percent", "net_bytes", "restarts")
SYSTEM_METRICS = {"cpu_percent": 1.0, "mem_used_bytes": 1 / 2**20, "net_rx_bytes": 1 / 2**20,
                  "net_tx_bytes": 1 / 2**20}  # the stats column and its scale: MiB for bytes
SYSTEM_NAMES = {"cpu_percent": "cpu_percent", "mem_used_bytes": "mem_mib", "net_rx_bytes": "net_rx_mib",
                "net_tx_bytes": "net_tx_mib"}


@dataclass
class Point:
    name: str  # e.g. loss, worker-1/loss, system/worker-0/cpu_percent
    value: float
    step: int


@dataclass
class RunFigures:
    """What a tracker logs of one run."""

    run_id: str
    folder: Path
    summary: dict[str, Any]
    params: dict[str, str]
    tags: dict[str, str]
    scalars: dict[str, float]
    series: list[Point] = field(default_factory=list)  # per-epoch and system metrics, by step
    artifacts: list[Path] = field(default_factory=list)
    wall_start: Optional[float] = None


def _number(value: Any) -> Optional[float]:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _rows(path: Path) -> list[dict[str, str]]:
    data = read_bounded(path, MAX_FILE)
    if data is None:
        return []
    return list(csv.DictReader(io.StringIO(data.decode("utf-8", "replace"))))


def _flat_params(spec: dict[str, Any]) -> dict[str, str]:
    """The spec as flat parameters, named as the flags are (batch_size, memory)."""
    from orchestrator.experiments.model import SPEC_ONLY
    from orchestrator.jobspec import load_spec

    flat = load_spec(spec).flat()
    return {SPEC_ONLY.get(k, k): str(v)[:500] for k, v in sorted(flat.items()) if v is not None}


def read(folder: Path, extra: Optional[dict[str, float]] = None) -> RunFigures:
    """The figures of the run collected into ``folder``; OrchError if it holds no summary.json."""
    raw = read_bounded(folder / "summary.json", MAX_FILE)
    if raw is None:
        raise OrchError(f"{folder} holds no summary.json; run `orch collect RUN` first")
    try:
        summary = json.loads(raw)
    except ValueError:
        raise OrchError(f"{folder / 'summary.json'} is not JSON; run `orch collect RUN` again") from None
    run_id = str(summary.get("run_id", folder.name))
    spec = summary.get("spec") or {}
    params = _flat_params(spec) if spec else {}
    from orchestrator.analysis import machine
    from orchestrator.jobspec import load_spec

    job = load_spec(spec) if spec else None
    tags = {"orch.run_id": run_id, "orch.state": str(summary.get("state", "")),
            "framework": job.framework.name if job else "", "backend": job.backend if job else "",
            "strategy": job.framework.resolved_strategy(job.workers) if job else "",
            "machine": machine.describe(machine.identity())}
    scalars = {name: v for name in RUN_METRICS if (v := _number(summary.get(name))) is not None}
    scalars.update({k: v for k, v in (extra or {}).items() if _number(v) is not None})
    for w in summary.get("workers") or []:
        who = f"{w.get('role', 'worker')}-{w.get('worker')}"
        for name in ("train_seconds", "test_accuracy", "cpu_mean_percent", "mem_max_bytes"):
            if (v := _number(w.get(name))) is not None:
                scalars[f"{who}/{name}"] = v
    series: list[Point] = []
    first = None
    for row in _rows(folder / "epochs.csv"):
        step = int(_number(row.get("epoch")) or 0)
        first = row.get("worker") if first is None else first
        for name in EPOCH_METRICS:
            if (v := _number(row.get(name))) is not None:
                series.append(Point(f"worker-{row.get('worker')}/{name}", v, step))
                if row.get("worker") == first:  # the job's curve: in sync training every worker agrees
                    series.append(Point(name, v, step))
    stats = _rows(folder / "stats.csv")
    start = min((t for r in stats if (t := _number(r.get("time"))) is not None), default=None)
    for row in stats:
        t = _number(row.get("time"))
        who = f"{row.get('role') or 'worker'}-{row.get('worker')}"
        if t is None or start is None:
            continue
        for column, scale in SYSTEM_METRICS.items():
            if (v := _number(row.get(column))) is not None:
                series.append(Point(f"system/{who}/{SYSTEM_NAMES[column]}", round(v * scale, 3), int(t - start)))
    names = [*(summary.get("files") or []), "report.html"]  # the report is written after summary.json
    artifacts = [folder / n for n in dict.fromkeys(names) if isinstance(n, str) and "/" not in n
                 and (folder / n).is_file() and not (folder / n).is_symlink()]
    return RunFigures(run_id, folder, summary, params, tags, scalars, series, artifacts, start)
