"""The tables the verbs print on stdout. Every cell is plain text: values never pass through markup, and are
shown safely (``printable``)."""
from __future__ import annotations

import time
from typing import Any, Iterable, Optional

from rich.table import Table
from rich.text import Text

from orchestrator.safetext import printable


def fmt(value: Any, spec: str = ".2f", suffix: str = "") -> str:
    """``value`` formatted, or "-" when there is none."""
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _cells(*values: Any) -> list[Text]:
    return [v if isinstance(v, Text) else Text(printable(str(v))) for v in values]


def _spec_value(spec: Any, name: str) -> str:
    if spec is not None and spec.script is not None and name in ("samples", "global_batch", "epochs"):
        return "script"  # the script's own arguments decide these, not orch's flags
    return "?" if spec is None else str(getattr(spec, name, "?"))


def runs_table(runs: Iterable[Any]) -> Table:
    """One row per RunInfo: its spec's shape, state and results."""
    table = Table("run", "state", "workers", "dataset", "samples", "batch", "epochs", "train s", "wall s",
                  "test acc", "samples/epoch per worker")
    for r in runs:
        per_worker = sorted({(w.get("samples_per_epoch") or [None])[-1] for w in r.workers} - {None})
        table.add_row(*_cells(
            r.run_id, str(r.state) + (", no supervisor" if r.supervised is False else ""), _spec_value(r.spec, "workers"), _spec_value(r.spec, "dataset"),
            _spec_value(r.spec, "samples"), _spec_value(r.spec, "global_batch"), _spec_value(r.spec, "epochs"),
            fmt(r.train_seconds), fmt(r.wall_seconds, ".1f"), fmt(r.test_accuracy, ".4f"),
            ", ".join(str(s) for s in per_worker) or "-",
        ))
    return table


def plan_table(plan: Any) -> Table:
    """`orch up --dry-run`: each replica that would start, what it would run, and its limits."""
    from orchestrator import contract, sizes

    spec = plan.spec
    table = Table("replica", "image", "runs", "cores", "cpus", "memory", "/dev/shm",
                  title=Text(f"run {spec.run_id} on {plan.backend}, in {plan.run_dir}"))
    for r in plan.replicas:
        runs = " ".join(r.command) if r.command else "orch's trainer"
        table.add_row(*_cells(r.name, r.image, runs, r.env.get(contract.ENV_CPUS, "any"), fmt(spec.cpus, "g"),
                              sizes.shown(spec.memory_mb), sizes.shown(r.shm_mb) if r.shm_mb else "the engine's"))
    return table


def workers_table(workers: Iterable[dict[str, Any]]) -> Table:
    """One row per worker of a finished run (RunInfo.workers)."""
    table = Table("replica", "train s", "test acc", "samples per epoch", "exit")
    for w in workers:
        table.add_row(*_cells(
            f"{w.get('role', 'worker')}-{w['worker']}", fmt(w.get("train_seconds")), fmt(w.get("test_accuracy"), ".4f"),
            ", ".join(str(s) for s in w.get("samples_per_epoch") or []) or "-", str(w.get("exit_code")),
        ))
    return table


def stats_table(run_id: str, snapshot: dict[tuple[str, int], Any]) -> Table:
    """The latest StatsSample of each container of a run."""
    table = Table("container", "CPU %", "memory", "limit", "net rx", "net tx", "disk read", "disk write", "pids",
                  title=Text(f"run {run_id}"))
    for key in sorted(snapshot):
        s = snapshot[key]
        table.add_row(*_cells(
            s.container, f"{s.cpu_percent:.1f}", f"{s.mem_used_bytes / 2**20:.0f} MiB",
            f"{s.mem_limit_bytes / 2**20:.0f} MiB", f"{s.net_rx_bytes / 1e6:.2f} MB", f"{s.net_tx_bytes / 1e6:.2f} MB",
            f"{s.blk_read_bytes / 1e6:.2f} MB", f"{s.blk_write_bytes / 1e6:.2f} MB", str(s.pids),
        ))
    return table


def comparison_table(rows: Iterable[dict[str, Any]]) -> Table:
    """`orch collect`: one row per run, with time ratio, speedup and efficiency (collect.compare)."""
    table = Table("run", "state", "workers", "samples", "test acc", "train s", "T(N)/T(1)", "speedup", "efficiency",
                  "mean CPU %", "network MB")
    for r in rows:
        table.add_row(*_cells(
            r["run_id"], r["state"], r["workers"], r["samples"], fmt(r["test_accuracy"], ".4f"),
            fmt(r["train_seconds"]), fmt(r["time_ratio"], ".2f", "x"), fmt(r["speedup"]), fmt(r["efficiency"]),
            fmt(r["cpu_mean_percent"], ".1f"), fmt(r["net_mb"], ".1f"),
        ))
    return table


def containers_table(summary: dict[str, Any]) -> Table:
    """`orch collect` of one run: its per-container figures."""
    table = Table("container", "train s", "test acc", "CPU mean %", "CPU max %", "mem max", "net rx MB", "net tx MB",
                  "samples", title=Text(f"per container, run {summary['run_id']}"))
    for w in summary["workers"]:
        mem, rx, tx = w["mem_max_bytes"], w["net_rx_bytes"], w["net_tx_bytes"]
        table.add_row(*_cells(
            f"worker-{w['worker']}", fmt(w["train_seconds"]), fmt(w["test_accuracy"], ".4f"),
            fmt(w["cpu_mean_percent"], ".1f"), fmt(w["cpu_max_percent"], ".1f"),
            fmt(mem and mem / 2**20, ".0f", " MiB"), fmt(rx and rx / 1e6, ".2f"), fmt(tx and tx / 1e6, ".2f"),
            w["stats_samples"],
        ))
    return table


def images_table(results: Iterable[Any]) -> Table:
    """`orch build`: each image, built or up to date."""
    table = Table("image", "status", "seconds", "size")
    for r in results:
        table.add_row(*_cells(r.tag, "built" if r.built else "up to date", f"{r.seconds:.1f}", f"{r.size / 1e9:.2f} GB"))
    return table


def checks_table(checks: Iterable[Any]) -> Table:
    """`orch doctor`: each check, whether it passed, and how to fix it."""
    table = Table("check", "ok", "detail", "fix")
    for c in checks:
        ok = Text("yes", style="green") if c.ok else Text("no", style="red")
        table.add_row(*_cells(c.name, ok, c.detail, "" if c.ok else c.hint))
    return table


def experiments_table(found: list[Any]) -> Table:
    """`orch experiment list`: one row per past sweep."""
    table = Table("experiment", "cells", "succeeded", "failed", "last run", "HTML report")
    for e in found:
        last = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_run)) if e.last_run else "–"
        table.add_row(*_cells(e.name, str(len(e.cells)), str(e.succeeded), str(len(e.cells) - e.succeeded), last,
                              str(e.report("report.html") or "–")))
    return table


def past_cells_table(past: Any) -> Table:
    """`orch experiment show`: each recorded cell, its state and its figures."""
    table = Table("cell", "state", "run", "train s", "wall s", "test acc", "samples/s", title=Text(past.name))
    for key, cell in sorted(past.cells.items()):
        s = (cell.get("summary") if isinstance(cell, dict) else None) or {}
        table.add_row(*_cells(key, str(cell.get("state", "?")), str(cell.get("run_id", "")),
                              fmt(s.get("train_seconds"), ".2f"), fmt(s.get("wall_seconds"), ".2f"),
                              fmt(s.get("test_accuracy"), ".4f"), fmt(s.get("samples_per_second"), ".0f")))
    return table


def cells_table(name: str, cells: list[Any], status: dict[str, str], title: Optional[str] = None) -> Table:
    """`orch experiment run --dry-run`: each cell, whether it would run (``status``), and its spec fields."""
    from orchestrator.experiments.model import SPEC_ONLY

    keys = sorted({k for c in cells for k in c.fields}, key=lambda k: SPEC_ONLY.get(k, k))
    table = Table("cell", "status", *(SPEC_ONLY.get(k, k) for k in keys),  # named as the file names them
                  title=Text(title or f"{name}: {len(cells)} cells"))
    for c in cells:
        table.add_row(*_cells(c.key, status.get(c.key, "to run"), *(str(c.fields.get(k, "")) for k in keys)))
    return table
