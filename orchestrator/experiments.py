"""`orch experiment`: sweeps of job specs over a grid, with repeats, resume, and a report."""
from __future__ import annotations

import itertools
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from . import metrics, report, runner
from .collect import collect
from .errors import ComposeMissing, DataError, EngineUnreachable, ImageMissing, InvalidSpec, OrchError
from .paths import Paths, default_paths
from .rundir import read_json, write_json
from .spec import flat_field_names, make_spec, shown

CELLS_FILE = "cells.json"
NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,23}$"
# Flat field names, as make_spec takes them: the generic fields and the framework's options. A run id is
# made per cell; roles follow from workers.
SWEEPABLE = sorted(set(flat_field_names()) - {"run_id", "roles"})
# Errors of the host, not of a cell: every later cell would fail the same way, so the sweep stops.
FATAL = (EngineUnreachable, ImageMissing, ComposeMissing, DataError)


class ReferenceRow(BaseModel):
    """One row of a published result to show next to ours."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    setup: str = Field(max_length=200)
    data: str = Field(max_length=200)
    accuracy: Optional[float] = Field(None, ge=0, le=100)
    seconds: Optional[float] = Field(None, ge=0)


class ReportOptions(BaseModel):
    """What the report shows beyond the measured table."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    title: str = Field("", max_length=200)
    reference_title: str = Field("", max_length=200)
    reference: list[ReferenceRow] = Field(default_factory=list, max_length=50)
    notes: str = Field("", max_length=10_000)


class Experiment(BaseModel):
    """An experiment file: a base spec, a grid to sweep, repeats, and what to report."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(..., pattern=NAME_PATTERN, description="lowercase letters, digits and -, at most 24")
    description: str = Field("", max_length=2000)
    base: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    repeats: int = Field(1, ge=1, le=20)
    quick: dict[str, Any] = Field(default_factory=dict)
    report: ReportOptions = Field(default_factory=ReportOptions)

    @field_validator("base", "quick")
    @classmethod
    def _known_fields(cls, value: dict[str, Any], info) -> dict[str, Any]:
        allowed = set(SWEEPABLE) | ({"repeats"} if info.field_name == "quick" else set())
        unknown = sorted(str(k) for k in value if k not in allowed)
        if unknown:
            raise ValueError(f"unknown field {shown(unknown[0])}; allowed: {', '.join(sorted(allowed))}")
        return value

    @field_validator("grid")
    @classmethod
    def _grid_axes(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in value.items():
            if key not in SWEEPABLE:
                raise ValueError(f"cannot sweep {shown(key)}; sweepable fields: {', '.join(SWEEPABLE)}")
            if not values:
                raise ValueError(f"{key}: needs at least one value")
            if len(values) > 50:
                raise ValueError(f"{key}: at most 50 values")
        cells = 1
        for values in value.values():
            cells *= len(values)
        if cells > 500:
            raise ValueError(f"the grid has {cells} cells; at most 500")
        return value


@dataclass(frozen=True)
class Cell:
    """One run of a sweep: a point of the grid and a repeat."""

    key: str
    params: dict[str, Any]
    repeat: int
    fields: dict[str, Any]


def load(path: Path) -> Experiment:
    """Read and validate an experiment file; every problem is an InvalidSpec naming the field."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidSpec(f"cannot read experiment file {path}: {exc.strerror or exc}") from None
    return parse(text, str(path))


def parse(text: str, source: str = "experiment") -> Experiment:
    """Validate experiment YAML text."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InvalidSpec(f"{source}: not valid YAML{where}") from None
    if not isinstance(doc, dict):
        raise InvalidSpec(f"{source}: must be a mapping with name, base, grid, repeats, quick and report")
    try:
        experiment = Experiment(**{str(k): v for k, v in doc.items()})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = ".".join(shown(p) for p in first.get("loc", ())) or "experiment"
        msg = first.get("msg", "invalid").removeprefix("Value error, ")
        raise InvalidSpec(f"{source}: {loc}: {one_line(msg)}") from None
    except TypeError as exc:
        raise InvalidSpec(f"{source}: {one_line(str(exc))}") from None
    expand(experiment)  # every cell must be a valid spec before anything runs
    expand(experiment, quick=True)
    return experiment


def one_line(text: str) -> str:
    """``text`` with line breaks escaped, for a one-line error."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _slug(value: Any) -> str:
    return re.sub(r"[^a-z0-9.]+", "", str(value).lower())[:12] or "x"


def _scaled_quick(experiment: Experiment) -> tuple[dict[str, Any], dict[str, list[Any]], int]:
    """The base, grid and repeats of --quick: the file's `quick` section, or a tenth of the samples, 1 epoch."""
    base, grid = dict(experiment.base), {k: list(v) for k, v in experiment.grid.items()}
    quick = dict(experiment.quick)
    repeats = int(quick.pop("repeats", 1))
    if not experiment.quick:
        quick = {"epochs": 1}
        if "samples" in grid:
            grid["samples"] = sorted({max(3000, int(s) // 10) for s in grid["samples"]})
        else:
            base["samples"] = max(3000, int(base.get("samples", 60000)) // 10)
    for key, value in quick.items():
        if key in grid:
            grid[key] = value if isinstance(value, list) else [value]
        else:
            base[key] = value
    return base, grid, repeats


def expand(experiment: Experiment, quick: bool = False) -> list[Cell]:
    """Every cell of the grid times the repeats, each with its validated spec fields."""
    if quick:
        base, grid, repeats = _scaled_quick(experiment)
    else:
        base, grid, repeats = dict(experiment.base), experiment.grid, experiment.repeats
    axes = list(grid)
    cells = []
    for values in itertools.product(*(grid[a] for a in axes)):
        params = dict(zip(axes, values))
        for repeat in range(repeats):
            key = "-".join([*(f"{a.replace('_', '')}{_slug(v)}" for a, v in params.items()), f"r{repeat}"])
            fields = {**base, **params}
            try:
                make_spec(**fields, run_id="validation")
            except InvalidSpec as exc:
                raise InvalidSpec(f"cell {key}: {exc.message}") from None
            cells.append(Cell(key=key, params=params, repeat=repeat, fields=fields))
    return cells


def results_dir(experiment: Experiment, quick: bool, root: Optional[Path] = None) -> Path:
    """Where an experiment's cells, runs and report go: ``<root>/<name>[-quick]``; root None is the
    default results root (``default_paths().results``)."""
    return (default_paths().results if root is None else Path(root)) / (experiment.name + ("-quick" if quick else ""))


def load_cells(out: Path) -> dict[str, Any]:
    """The recorded state of every cell run so far ({} if none is recorded)."""
    cells = read_json(out / CELLS_FILE)
    return cells if isinstance(cells, dict) else {}


def _save_cells(out: Path, cells: dict[str, Any]) -> None:
    write_json(out / CELLS_FILE, cells)


def is_done(record: Optional[dict[str, Any]], cell: Cell) -> bool:
    """Whether a recorded cell succeeded with the same spec fields (so a re-run can skip it)."""
    return bool(record) and record.get("state") == "succeeded" and record.get("fields") == cell.fields


@dataclass
class Progress:
    """Where a sweep is, for the progress display."""

    total: int
    done: int = 0
    skipped: int = 0
    failed: int = 0
    started: float = field(default_factory=time.monotonic)
    current: str = ""
    durations: list[float] = field(default_factory=list)

    @property
    def eta_seconds(self) -> Optional[float]:
        if not self.durations:
            return None
        remaining = self.total - self.done
        return remaining * sum(self.durations) / len(self.durations)


def run(
    experiment: Experiment,
    quick: bool = False,
    force: bool = False,
    root: Optional[Path] = None,
    on_progress: Optional[Callable[[Progress], None]] = None,
    say: Optional[Callable[[str], None]] = None,
    paths: Optional[Paths] = None,
) -> tuple[Path, dict[str, Any]]:
    """Run every cell not already done; record each (failed ones too); write the report. Returns (dir, cells).

    Runs go under ``paths.runs``; the experiment's folder under ``root`` (None: ``paths.results``).
    """
    paths = paths or default_paths()
    say = say or (lambda _m: None)
    on_progress = on_progress or (lambda _p: None)
    cells = expand(experiment, quick)
    out = results_dir(experiment, quick, paths.results if root is None else root)
    out.mkdir(parents=True, exist_ok=True)
    (out / "experiment.json").write_text(json.dumps(experiment.model_dump(), indent=2) + "\n")
    recorded = {} if force else load_cells(out)
    progress = Progress(total=len(cells))
    for cell in cells:
        progress.current = cell.key
        if is_done(recorded.get(cell.key), cell):
            progress.done += 1
            progress.skipped += 1
            continue
        on_progress(progress)
        run_id = f"{experiment.name}-{cell.key}-{secrets.token_hex(2)}"[:63].rstrip("-")
        spec = make_spec(**cell.fields, run_id=run_id)
        started = time.monotonic()
        record: dict[str, Any] = {"params": cell.params, "repeat": cell.repeat, "fields": cell.fields,
                                  "run_id": run_id, "started": time.time()}
        try:
            runner.up(spec, paths=paths, say=say)
            record["state"] = "succeeded"
        except FATAL:
            raise
        except KeyboardInterrupt:
            record["state"] = "interrupted"
            recorded[cell.key] = record
            _save_cells(out, recorded)
            raise
        except OrchError as exc:
            record.update(state="failed", error=exc.message)
            progress.failed += 1
            say(f"cell {cell.key} failed: {exc.message}; going on")
        try:
            record["summary"] = collect([run_id], out_root=out / "runs", paths=paths)[0]
        except OrchError as exc:
            record["collect_error"] = exc.message
        recorded[cell.key] = record
        _save_cells(out, recorded)
        progress.done += 1
        progress.durations.append(time.monotonic() - started)
    progress.current = "finished"
    on_progress(progress)
    current = {c.key: recorded[c.key] for c in cells if c.key in recorded}
    report.write_experiment_report(experiment, quick, current, metrics.aggregate(current), out)
    return out, current
