"""Scaling figures, in one place: time ratio, speedup, efficiency, baselines, repeats and synchronisation.

As in seed 002: speedup = T(1) / T(N) and efficiency = speedup / N. The time ratio T(N) / T(1) is the
figure seed 000 reported (its 4.33x). A run is compared with the 1-worker run on the same data, samples,
epochs and global batch; a grid point of an experiment with the 1-worker point whose other parameters are
the same. ``collect.compare``, the experiment aggregation and the experiment report all use these.
Pure functions of plain data: no files, no engine.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from statistics import median
from typing import Any, Callable, Hashable, Iterable, Mapping, Optional, Sequence, TypeVar

from orchestrator.contract import finite
from orchestrator.run.records import MAX_SECONDS

T = TypeVar("T")
Index = Mapping[Hashable, Mapping[str, Any]]  # baselines by key, from run_baselines or point_baselines
MedianRange = tuple[float, float, float]  # (median, min, max)


# -- ratios ---------------------------------------------------------------------------------------
def time_ratio(t_n: Optional[float], t_1: Optional[float]) -> Optional[float]:
    """T(N) / T(1): 1.0 means distributing cost nothing. None without both (non-zero) times."""
    return t_n / t_1 if t_n and t_1 else None


def speedup(t_n: Optional[float], t_1: Optional[float]) -> Optional[float]:
    """T(1) / T(N): how many times faster N workers are than one. None without both (non-zero) times."""
    return t_1 / t_n if t_n and t_1 else None


def efficiency(t_n: Optional[float], t_1: Optional[float], workers: int) -> Optional[float]:
    """Speedup / N: 1.0 is perfect scaling. None without both times or with no workers."""
    s = speedup(t_n, t_1)
    return s / workers if s is not None and workers else None


@dataclass(frozen=True)
class Scaling:
    """The three figures of N workers against one."""

    time_ratio: Optional[float]
    speedup: Optional[float]
    efficiency: Optional[float]

    def to_dict(self) -> dict[str, Optional[float]]:
        return {"time_ratio": self.time_ratio, "speedup": self.speedup, "efficiency": self.efficiency}


def cpu_bound(workers: int, one_cpu_percent: Optional[float], cores: Optional[int] = None) -> Optional[float]:
    """The best speedup ``workers`` can reach on this machine at equal work: its cores over the CPU one worker
    used (100 = one core), and never more than ``workers``. One process that already keeps both cores of a
    2-core host busy leaves N containers no room at all (about 1.0), whatever N is; None if unknown."""
    cores = cores or os.cpu_count() or 1
    if not one_cpu_percent or one_cpu_percent <= 0 or workers < 1:
        return None
    return round(min(float(workers), cores * 100.0 / one_cpu_percent), 3)


def machine_bound(row: Mapping[str, Any]) -> tuple[Optional[float], str]:
    """The best speedup this machine allows a row of ``aggregate``, and what it is: T(1) over the floor measured
    beside it ("floor"), else its cores over the CPU the one-worker run used ("cpu"); (None, "") if neither."""
    if row.get("floor_bound"):
        return row["floor_bound"], "floor"
    if row.get("cpu_bound"):
        return row["cpu_bound"], "cpu"
    return None, ""


def scaling(t_n: Optional[float], t_1: Optional[float], workers: int) -> Scaling:
    """Time ratio, speedup and efficiency of ``workers`` workers taking ``t_n`` against one taking ``t_1``."""
    return Scaling(time_ratio(t_n, t_1), speedup(t_n, t_1), efficiency(t_n, t_1, workers))


# -- baselines ------------------------------------------------------------------------------------
def baselines(items: Iterable[T], key: Callable[[T], Hashable], workers: Callable[[T], int],
              usable: Callable[[T], bool]) -> dict[Hashable, T]:
    """The usable 1-worker item of each key (the last one where there are several)."""
    return {key(item): item for item in items if workers(item) == 1 and usable(item)}


def run_key(spec: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a run must share with its baseline: data set, samples, epochs and global batch."""
    return spec.get("dataset"), spec.get("samples"), spec.get("epochs"), spec.get("global_batch")


def run_workers(summary: Mapping[str, Any]) -> int:
    """The workers of a collected run (its summary's spec), 0 if it names none."""
    return int((summary.get("spec") or {}).get("workers") or 0)


def run_baselines(summaries: Iterable[Mapping[str, Any]]) -> dict[Hashable, Mapping[str, Any]]:
    """The 1-worker runs that succeeded with a train time, every worker's figures valid, by ``run_key``."""
    return baselines(summaries, lambda s: run_key(s.get("spec") or {}), run_workers,
                     lambda s: not s.get("failed") and not s.get("partial") and bool(s.get("train_seconds")))


def run_baseline(summary: Mapping[str, Any], index: Index) -> Optional[Mapping[str, Any]]:
    """The baseline of one collected run in ``index`` (from ``run_baselines``), or None."""
    return index.get(run_key(summary.get("spec") or {}))


SCALE = "workers"  # the axis a sweep's scaling figures are taken along, unless its report names another


def point_id(params: Mapping[str, Any]) -> str:
    """A grid point's identity: its parameters, in one text (the cells of one point, its repeats, share it)."""
    return json.dumps(finite(dict(params)), sort_keys=True, default=str, allow_nan=False)


def point_key(params: Mapping[str, Any], axis: str = SCALE) -> str:
    """What a grid point must share with its baseline: every parameter but the scaling ``axis``."""
    return point_id({k: v for k, v in params.items() if k != axis})


def point_scale(row: Mapping[str, Any], axis: str = SCALE) -> int:
    """A grid point's value on the scaling ``axis`` (workers or replicas; 1 where the grid does not sweep it)."""
    return int(row["params"].get(axis, 1))


def point_baselines(rows: Iterable[Mapping[str, Any]], axis: str = SCALE) -> dict[Hashable, Mapping[str, Any]]:
    """The grid points at 1 on the scaling ``axis`` with a train time, by ``point_key``."""
    return baselines(rows, lambda r: point_key(r["params"], axis), lambda r: point_scale(r, axis),
                     lambda r: bool(r.get("train_seconds")))


def point_baseline(row: Mapping[str, Any], index: Index, axis: str = SCALE) -> Optional[Mapping[str, Any]]:
    """The baseline of one grid point in ``index`` (from ``point_baselines``), or None."""
    return index.get(point_key(row["params"], axis))


# -- repeats and steps ----------------------------------------------------------------------------
def median_range(values: Sequence[float]) -> Optional[MedianRange]:
    """(median, min, max) of the repeats' values; None if there are none."""
    return (median(values), min(values), max(values)) if values else None


def speedup_range(t_n: Optional[MedianRange], t_1: Optional[float],
                  workers: int) -> tuple[Optional[MedianRange], Optional[MedianRange]]:
    """Speedup and efficiency as (median, min, max) over the N-worker repeats, each against the median
    one-worker time ``t_1``: the slowest repeat gives the least speedup. (None, None) if either is unknown."""
    if not t_n or not t_1 or min(t_n) <= 0 or workers < 1:
        return None, None
    med, lo, hi = t_n
    return (tuple(speedup(t, t_1) for t in (med, hi, lo)),  # type: ignore[return-value]
            tuple(efficiency(t, t_1, workers) for t in (med, hi, lo)))


def step_seconds(train_seconds: Optional[float], epochs: int, steps_per_epoch: Optional[int]) -> Optional[float]:
    """Seconds per training step: train time over every step of every epoch. None if unknown."""
    if not train_seconds or not steps_per_epoch or epochs < 1:
        return None
    return train_seconds / (epochs * steps_per_epoch)


@dataclass(frozen=True)
class SyncCost:
    """What synchronisation adds to a step of N workers against one: seconds, and share of the step."""

    seconds_per_step: float
    share: float


def sync_cost(step_n: Optional[float], step_1: Optional[float], workers: int) -> Optional[SyncCost]:
    """The step time of N workers minus that of one (never below 0), and its share of the N-worker step.

    With the same global batch a step is the same arithmetic for every N on the same cores, so the
    difference is the all-reduce and the wait for the slowest worker. None for one worker or unknown times.
    """
    if workers < 2 or not step_n or not step_1:
        return None
    extra = max(step_n - step_1, 0.0)
    return SyncCost(seconds_per_step=extra, share=extra / step_n)


# -- an experiment's cells, aggregated --------------------------------------------------------------
def _point(record: Mapping[str, Any]) -> dict[str, Any]:
    return {"params": record["params"], "runs": 0, "failed": 0, "acc": [], "train": [], "wall": [], "cpu": [],
            "net": [], "step": [], "epoch": [], "val_loss": [], "val_acc": [], "tput": [], "compute": [], "wait": [],
            "loss_curve": [], "global_batch": None, "floor": [], "compute_floor": [], "transport_floor": [],
            "floor_note": None}


def is_seconds(value: Any) -> bool:
    """Whether ``value`` is a number of seconds a record may hold: not negative and at most MAX_SECONDS, as a
    container's records are held (run/records.py)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_SECONDS


def named_baseline(rows: list[dict[str, Any]], baseline: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
    """The row whose parameters include every item of ``baseline``, with a train time; None if none has."""
    return next((r for r in rows if r["train_seconds"] and all(r["params"].get(k) == v for k, v in baseline.items())),
                None)


def cells_cores(cells: Mapping[str, Mapping[str, Any]]) -> Optional[int]:
    """The cores of the machine most of ``cells`` were measured on; None where they recorded none."""
    recorded = [(c.get("machine") or {}).get("cores") for c in cells.values() if isinstance(c.get("machine"), dict)]
    return max(set(recorded), key=recorded.count) if recorded and all(isinstance(n, int) for n in recorded) else None


def aggregate(cells: Mapping[str, Mapping[str, Any]], axis: str = SCALE,
              baseline: Optional[Mapping[str, Any]] = None) -> list[dict[str, Any]]:
    """One row per grid point of an experiment's recorded cells (cells.json): the median and range over
    repeats of accuracy, train, wall, epoch and step time, validation loss and accuracy after the last
    epoch, CPU and network per worker; the scaling figures of the medians against the matching point at 1
    on the scaling ``axis`` (1 worker, or 1 replica), or against the one ``baseline`` row (then N is
    workers × replicas); the synchronisation cost per step; the CPU bound of each row on the cores of the
    machine the cells were measured on (this one's if they recorded none). Failed cells count in ``runs`` and
    ``failed`` only."""
    cores = cells_cores(cells)
    groups: dict[str, dict[str, Any]] = {}
    for record in cells.values():
        group = groups.setdefault(point_id(record["params"]), _point(record))
        group["runs"] += 1
        summary = record.get("summary") or {}
        spec = summary.get("spec") or {}
        if group["global_batch"] is None:  # what the point asked for, failed or not
            group["global_batch"] = spec.get("global_batch")
        if record.get("state") != "succeeded":
            group["failed"] += 1
            continue
        workers = int(record["fields"].get("workers", spec.get("workers", 1)))
        for name, value in (("acc", summary.get("test_accuracy")), ("train", summary.get("train_seconds")),
                            ("wall", summary.get("wall_seconds")), ("cpu", summary.get("cpu_mean_percent")),
                            ("epoch", summary.get("epoch_seconds")), ("val_loss", summary.get("val_loss")),
                            ("val_acc", summary.get("val_accuracy"))):
            if value is not None:
                group[name].append(value)
        if summary.get("net_bytes") is not None:
            group["net"].append(summary["net_bytes"] / workers)
        for name, key in (("tput", "samples_per_second"), ("compute", "compute_seconds"),
                          ("wait", "allreduce_wait_seconds")):
            if summary.get(key) is not None:
                group[name].append(summary[key])
        floor = record.get("floor")
        parts = [floor.get(name) for name in ("floor", "compute_floor", "transport_floor")] \
            if isinstance(floor, dict) else []
        if parts and all(is_seconds(v) for v in parts):
            for name, value in zip(("floor", "compute_floor", "transport_floor"), parts):
                group[name].append(value)
        elif isinstance(floor, dict) and group["floor_note"] is None:
            group["floor_note"] = str(floor.get("none") or floor.get("error") or "not measured yet")
        if summary.get("loss_curve") and not group["loss_curve"]:  # the first repeat's
            group["loss_curve"] = list(summary["loss_curve"])
        steps = ((summary.get("workers") or [{}])[0]).get("steps_per_epoch")
        step = step_seconds(summary.get("train_seconds"), int(spec.get("epochs", 1)), steps)
        if step is not None:
            group["step"].append(step)
    rows = [{
        "params": g["params"], "runs": g["runs"], "failed": g["failed"],
        "test_accuracy": median_range(g["acc"]), "train_seconds": median_range(g["train"]),
        "wall_seconds": median_range(g["wall"]), "cpu_mean_percent": median_range(g["cpu"]),
        "net_bytes_per_worker": median_range(g["net"]), "step_seconds": median_range(g["step"]),
        "epoch_seconds": median_range(g["epoch"]), "val_loss": median_range(g["val_loss"]),
        "val_accuracy": median_range(g["val_acc"]), "samples_per_second": median_range(g["tput"]),
        "compute_seconds": median_range(g["compute"]), "allreduce_wait_seconds": median_range(g["wait"]),
        "loss_curve": g["loss_curve"], "global_batch": g["global_batch"],
        "floor_seconds": median_range(g["floor"]), "compute_floor": median_range(g["compute_floor"]),
        "transport_floor": median_range(g["transport_floor"]), "floor_note": g["floor_note"],
    } for g in groups.values()]
    index = point_baselines(rows, axis)
    named = named_baseline(rows, baseline) if baseline else None
    for row in rows:
        if baseline:
            base = named
            n = int(row["params"].get("workers", 1)) * int(row["params"].get("replicas", 1))
        else:
            base = point_baseline(row, index, axis)
            n = point_scale(row, axis)
        t_1 = base["train_seconds"][0] if base else None
        row["n"], row["base_seconds"] = n, t_1
        row.update(scaling(row["train_seconds"][0] if row["train_seconds"] else None, t_1, n).to_dict())
        row["speedup_range"], row["efficiency_range"] = speedup_range(row["train_seconds"], t_1, n)
        row["cpu_bound"] = cpu_bound(n, base["cpu_mean_percent"][0] if base and base["cpu_mean_percent"] else None,
                                     cores)
        floor = row["floor_seconds"][0] if row["floor_seconds"] else None
        row["vs_floor"] = time_ratio(row["train_seconds"][0] if row["train_seconds"] else None, floor)
        row["floor_bound"] = speedup(floor, t_1)
        # A step is the same arithmetic as the baseline's only at the same global batch (not with a batch per
        # worker): only then is the extra step time synchronisation.
        same_work = base is not None and row["global_batch"] == base["global_batch"]
        sync = sync_cost(row["step_seconds"][0] if row["step_seconds"] else None,
                         base["step_seconds"][0] if base is not None and same_work and base["step_seconds"] else None,
                         n)
        row["same_work"] = same_work
        row["sync_seconds_per_step"] = sync.seconds_per_step if sync else None
        row["sync_share"] = sync.share if sync else None
    if baseline:  # setups: in the order the file gives them
        return rows
    return sorted(rows, key=lambda r: [str(r["params"].get(k)).zfill(12) for k in sorted(r["params"])])
