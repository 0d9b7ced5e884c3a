"""The seeds' studies: each experiment's cells (experiments/results/<name>/cells.json) as a table."""
from __future__ import annotations


from typing import Any, Callable, Optional, Sequence

from figures.core import ROOT, data, emit, table, machine_line, link
from orchestrator.analysis import metrics
from orchestrator.analysis.numbers import median_range, sig, with_unit


# -- the seeds' studies (experiments/results/<name>/cells.json) -----------------------------------------
def _experiment(name: str) -> tuple[list[dict], dict, Any]:
    """A study's rows as its report aggregates them (the file's scaling axis and baseline), its cells and file."""
    from orchestrator.experiments.file import load

    cells = data(f"experiments/results/{name}/cells.json")
    experiment = load(ROOT / "experiments" / f"{name}.yaml")  # the file's axis and baseline: the study, not data
    return metrics.aggregate(cells, experiment.report.scale, experiment.report.baseline), cells, experiment


def _mr(value: Optional[tuple], scale: float = 1.0) -> str:
    """A (median, min, max) as orch's reports write it (``numbers.median_range``), with the pages' dash for none."""
    return median_range(value, scale, none="—")


def experiment_source(name: str) -> None:
    """Where a study's table comes from: its command, repeats and machine."""
    cells = data(f"experiments/results/{name}/cells.json")
    repeats = 1 + max(int(c.get("repeat", 0)) for c in cells.values())
    emit(f"`orch experiment run experiments/{name}.yaml --out experiments/results`: "
         f"{repeats} repeat{'s' if repeats > 1 else ''} of each cell (the median, with the range in brackets), on "
         f"{machine_line(cells.values())}. Report: "
         f"[experiments/results/{name}/report.md]({link(f'experiments/results/{name}/report.md')}).")


def experiment_table(name: str, columns: Sequence[str], params: Sequence[str] = ()) -> None:
    """A study's rows (a grid point or setup each) with the named ``columns`` of orch's own aggregation; ``params``
    names the fields shown first ("setup": every field of the row not shown on its own)."""
    rows, _cells, experiment = _experiment(name)
    baseline = experiment.report.baseline
    shown: dict[str, tuple[str, Callable[[dict], str]]] = {
        "test_accuracy": ("test accuracy", lambda r: _mr(r["test_accuracy"])),
        "val_loss": ("val loss", lambda r: _mr(r["val_loss"])),
        "train": ("train s", lambda r: _mr(r["train_seconds"])),
        "epoch": ("s per epoch", lambda r: _mr(r["epoch_seconds"])),
        "ratio": ("T(N)/T(1)" if not baseline else
                  "T/T(" + ", ".join(f"{k} {v}" for k, v in baseline.items()) + ")",
                  lambda r: with_unit(r["time_ratio"], "x", none="—")),
        "floor": ("floor s", lambda r: _mr(r["floor_seconds"])),
        "vs_floor": ("T(N)/floor(N)", lambda r: sig(r["vs_floor"], none="—")),
        "bound": ("best speedup this machine allows", lambda r: sig(metrics.machine_bound(r)[0], none="—")),
        "speedup": ("speedup", lambda r: sig(r["speedup"], none="—")),
        "cpu": ("CPU % per container", lambda r: _mr(r["cpu_mean_percent"])),
        "net": ("network MB per worker", lambda r: _mr(r["net_bytes_per_worker"], 1e-6)),
        "samples_per_second": ("samples/s", lambda r: _mr(r["samples_per_second"])),
    }
    def param(r: dict, name: str) -> str:
        if name == "setup":  # every field the row sets, as the report names a setup
            return ", ".join(f"{k} {v}" for k, v in r["params"].items() if k not in params) or "—"
        return str(r["params"].get(name, "—"))

    heads = [*params, *(shown[c][0] for c in columns)]
    emit(table(heads, [[param(r, p) for p in params] + [shown[c][1](r) for c in columns] for r in rows]))
