"""Results where researchers look: TensorBoard event files and MLflow runs, written by the host from orch's own
records.

What is tracked is a run's results folder, as `orch collect` writes it (``summary.json``, ``epochs.csv``,
``stats.csv``, plots), read back through ``figures``. Those files are the host's, written after the contract's
checks of what the containers wrote; no container talks to a tracking server. Tracking is never the job: a
tracker that is missing, down or slow costs one line on stderr, and `orch track RUN...` logs finished runs
later, exactly once.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable, Optional

TARGETS = ("mlflow", "tensorboard")
Say = Callable[[str], None]


def targets_from(value: Optional[str]) -> tuple[str, ...]:
    """The trackers a comma-separated ``--track`` (or ``$ORCH_TRACK``) names; ValueError for an unknown one."""
    text = value if value is not None else os.environ.get("ORCH_TRACK", "")
    names = tuple(dict.fromkeys(n.strip().lower() for n in text.split(",") if n.strip()))
    for name in names:
        if name not in TARGETS and name != "none":
            raise ValueError(f"{name!r} is not a tracker orch has; choose {' or '.join(TARGETS)} (comma-separated), "
                             "e.g. --track mlflow")
    return tuple(n for n in names if n != "none")


def track_run(run_id: str, targets: tuple[str, ...], *, uri: Optional[str] = None, paths: Any = None,
              say: Optional[Say] = None, folder: Optional[Path] = None, experiment: Optional[str] = None,
              parent: Optional[str] = None, extra: Optional[dict[str, float]] = None) -> bool:
    """Track one finished run in ``targets``; collected first into the results folder where it is not yet.
    A tracker's failure is one line through ``say`` and False: the run and its results are untouched."""
    from orchestrator.paths import default_paths
    from orchestrator.tracking import figures as read_figures

    paths = paths or default_paths()
    say = say or (lambda _line: None)
    from orchestrator.run.rundir import RUN_FILE, RunDir

    folder = folder or paths.results / run_id
    ok = True
    try:
        run = RunDir.of(paths, run_id)
        info = run.record() if run.exists() else None
        if info is not None and not info.state.is_terminal:
            say(f"{run_id} has not finished ({info.state.value}); track it once it has: `orch track {run_id}`")
            return False
        summary = folder / "summary.json"
        if info is not None and (not summary.is_file()
                                 or (run.path / RUN_FILE).stat().st_mtime > summary.stat().st_mtime):
            from orchestrator.analysis.collect import collect

            collect([run_id], out_root=folder.parent, paths=paths)  # the results of the finished run, whole
        figures = read_figures.read(folder, extra)
    except Exception as exc:  # noqa: BLE001 - tracking never fails the job
        say(f"tracking {run_id} failed: {_why(exc)}; `orch track {run_id}` tries again")
        return False
    if "tensorboard" in targets:
        try:
            from orchestrator.tracking import tensorboard

            out = tensorboard.write(figures)
            say(f"{run_id}: TensorBoard events in {out} (`tensorboard --logdir {paths.results}`)")
        except Exception as exc:  # noqa: BLE001
            say(f"tracking {run_id} in TensorBoard failed: {_why(exc)}; `orch track {run_id}` tries again")
            ok = False
    if "mlflow" in targets:
        from orchestrator.tracking import mlflow

        where = mlflow.tracking_uri(uri, paths.results)
        try:
            run_dir = paths.runs / run_id
            mlflow_id, logged = mlflow.log_run(figures, where, experiment or mlflow.DEFAULT_EXPERIMENT, parent,
                                               run_dir if run_dir.is_dir() else None)
            say(f"{run_id}: {'logged to' if logged else 'already in'} MLflow at {_shown_uri(where)} "
                f"(run {mlflow_id})")
        except Exception as exc:  # noqa: BLE001
            say(f"tracking {run_id} in MLflow failed: {_why(exc)}; the run is recorded, and `orch track {run_id}` "
                "logs it later")
            ok = False
    return ok


def track_sweep(folder: Path, targets: tuple[str, ...], *, uri: Optional[str] = None, paths: Any = None,
                say: Optional[Say] = None) -> bool:
    """Track a sweep's cells (from its cells.json): in MLflow one experiment named after it, a parent run and
    a child run per cell, each with its time ratio, speedup and efficiency against its baseline."""
    from orchestrator.analysis import metrics
    from orchestrator.experiments.sweep import load_cells
    from orchestrator.paths import default_paths
    from orchestrator.run.rundir import read_json

    paths = paths or default_paths()
    say = say or (lambda _line: None)
    cells, spec = load_cells(folder), read_json(folder / "experiment.json")  # bounded reads, links refused
    if not cells or not isinstance(spec, dict):
        say(f"tracking {folder.name} failed: no readable cells.json and experiment.json in {folder}")
        return False
    from orchestrator.jobspec import RUN_ID_PATTERN

    name = folder.resolve().name
    summaries = [c["summary"] for c in cells.values() if isinstance(c, dict) and isinstance(c.get("summary"), dict)]
    index = metrics.run_baselines(summaries)
    # The experiment's own baseline cell where it names one (report.baseline), else each cell's 1-worker run.
    named = (spec.get("report") or {}).get("baseline") or {}
    chosen = next((c["summary"] for c in cells.values() if named and isinstance(c, dict)
                   and c.get("state") == "succeeded"
                   and isinstance(c.get("summary"), dict) and isinstance(c.get("fields"), dict)
                   and all(c["fields"].get(k) == v for k, v in named.items())), None)
    parent = None
    ok = True
    if "mlflow" in targets:
        from orchestrator.tracking import mlflow

        try:
            params = {k: str(v)[:500] for k, v in (spec.get("base") or {}).items()}
            params.update({f"grid.{k}": str(v)[:500] for k, v in (spec.get("grid") or {}).items()})
            parent = mlflow.log_parent(mlflow.tracking_uri(uri, paths.results), name, name,
                                       {"orch.experiment": str(spec.get("name", name))}, params)
        except Exception as exc:  # noqa: BLE001
            say(f"tracking {name} in MLflow failed: {_why(exc)}; `orch track {folder}` tries again")
            targets, ok = tuple(t for t in targets if t != "mlflow"), False
            if not targets:
                return False
    for key, cell in sorted(cells.items()):
        summary = cell.get("summary") if isinstance(cell, dict) else None
        if not isinstance(summary, dict) or not re.fullmatch(RUN_ID_PATTERN, str(cell.get("run_id", ""))):
            continue
        base = chosen if chosen is not None else metrics.run_baseline(summary, index)
        scaling = metrics.scaling(summary.get("train_seconds"), (base or {}).get("train_seconds"),
                                  metrics.run_workers(summary))
        extra = {k: v for k, v in (("time_ratio", scaling.time_ratio), ("speedup", scaling.speedup),
                                   ("efficiency", scaling.efficiency)) if v is not None}
        ok &= track_run(str(cell["run_id"]), targets, uri=uri, paths=paths, say=say,
                        folder=folder / "runs" / str(cell["run_id"]), experiment=name, parent=parent, extra=extra)
    return ok


def _why(exc: BaseException) -> str:
    from orchestrator.errors import OrchError
    from orchestrator.safetext import one_line

    text = exc.message if isinstance(exc, OrchError) else f"{type(exc).__name__}: {exc}"
    return one_line(_shown_uri(text), 200)


def _shown_uri(uri: str) -> str:
    """A tracking URI (or a message holding one) without credentials."""
    return re.sub(r"//[^/@\s]*@", "//", uri)
