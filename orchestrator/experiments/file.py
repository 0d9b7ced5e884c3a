"""Experiment files: the model, its YAML (bounded and alias-free), cell keys and the grid's expansion.

An experiment file is YAML of at most MAX_BYTES, without anchors or aliases, at most MAX_DEPTH deep; each
problem in it is a one-line InvalidSpec. Cell keys map grid points into the run-id alphabet without
collisions; ``cell_run_id`` alone makes a run id of one, and ``expand`` (so --dry-run) validates that shape.
"""
from __future__ import annotations

import difflib
import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from orchestrator.errors import InvalidSpec
from orchestrator.experiments.keys import _axis_parts, cell_run_id, setup_key
from orchestrator.jobspec import JobSpec, flat_field_names, make_spec, shown
from orchestrator.jobspec.fields import flag_aliases
from orchestrator.jobspec.messages import describe_all, say

EXAMPLES = {"repeats": "3", "name": "my-sweep", "grid": "{workers: [1, 2, 3]}"}  # for errors about the file itself
from orchestrator.run.scripts import absolute
from orchestrator.safeio import Unsafe, read_bounded
from orchestrator.safetext import one_line

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,23}$"
MAX_BYTES = 64 << 10  # of an experiment file (a valid one is at most ~40 KiB); pure-Python YAML reads it in < 1 s
MAX_DEPTH = 32  # nesting of its YAML
MAX_MESSAGE = 400  # characters of an error about it
MAX_VALUES, MAX_CELLS, MAX_REPEATS, MAX_TOTAL_CELLS = 50, 500, 20, 1000  # a grid's cells; a file's, all told
TOKEN_HEX = 4  # the random suffix of a run id; expand validates with as many zeros
# What a file names a field: the flag's name with _ for - (batch_size), for the generic fields, each framework's
# and each backend's options. A run id is made per cell; roles follow from workers. Inside, the loaded file
# uses the spec's names (global_batch), which cells.json records and cell keys are made of.
FLAG_NAMES = flag_aliases(JobSpec)  # batch_size -> global_batch, memory -> memory_mb, disk_limit -> disk_limit_mb
SPEC_ONLY = {field: name for name, field in FLAG_NAMES.items()}
NAMES = sorted(set(flat_field_names()) - {"run_id", "roles"} - set(SPEC_ONLY))
SWEEPABLE = sorted(FLAG_NAMES.get(n, n) for n in NAMES)  # as the spec names them, after loading


def _unknown(key: Any, where: str = "") -> str:
    close = difflib.get_close_matches(str(key), NAMES + ["repeats"], n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    return (f"unknown field {shown(key)}{where}; {hint}a file's fields are the flags' names with _ for - "
            "(`orch up --help` lists them)")


def _spec_names(fields: Any, where: str) -> Any:
    """A mapping of fields named as the flags are (batch_size) with the spec's names (global_batch); ValueError
    for a spec-only name, which files do not use."""
    if not isinstance(fields, dict):
        return fields
    for key in fields:
        if key in SPEC_ONLY:
            raise ValueError(f"{where}{key}: experiment files name it as the flag does: {SPEC_ONLY[key]}")
    return {FLAG_NAMES.get(k, k) if isinstance(k, str) else k: v for k, v in fields.items()}


class _Loader(yaml.SafeLoader):
    """SafeLoader refusing anchors and aliases (a few hundred bytes of nested aliases expand to gigabytes)
    and nesting deeper than MAX_DEPTH, where the parser meets them."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's parser is untyped
        problem = ("anchors and aliases (& and *) are not allowed" if getattr(event, "anchor", None) is not None
                   else f"nested deeper than {MAX_DEPTH} levels" if self.depth >= MAX_DEPTH else None)
        if problem:
            raise yaml.composer.ComposerError(None, None, problem, event.start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class ReferenceRow(BaseModel):
    """One row of a published result to show next to ours."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    setup: str = Field(max_length=200)
    data: str = Field(max_length=200)
    accuracy: Optional[float] = Field(default=None, ge=0, le=100)
    seconds: Optional[float] = Field(default=None, ge=0)


class ReportOptions(BaseModel):
    """What the report shows beyond the measured table."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    title: str = Field(default="", max_length=200)
    # A scaling study (as PyTorch DDP scaling on MNIST): speedup, efficiency and throughput per N, the loss curves, and the step time
    # split into compute and the all-reduce wait, where the trainer measures it.
    scaling: bool = False
    reference_title: str = Field(default="", max_length=200)
    reference: list[ReferenceRow] = Field(default_factory=list, max_length=50)
    notes: str = Field(default="", max_length=10_000)
    # The axis the scaling figures (T(N)/T(1), speedup, efficiency) are taken along: N containers, or N
    # replicas inside one (MirroredStrategy).
    scale: Literal["workers", "replicas"] = "workers"
    # Or one cell every other is compared with, named by its parameters (e.g. {strategy: single}): for
    # setups that differ in more than one field, such as strategies. N is then workers × replicas.
    baseline: dict[str, Any] = Field(default_factory=dict)
    # Measure this machine's floor beside every cell (experiments/floor.py): one rank alone at the per-rank
    # batch, pinned as in the cell, and the transport's all-reduce p50; the report shows T(N)/floor and draws
    # T(1)/floor as the best speedup this machine allows.
    floor: bool = False


class Experiment(BaseModel):
    """An experiment file: a base spec, a grid to sweep, repeats, and what to report."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(..., pattern=NAME_PATTERN, description="lowercase letters, digits and -, at most 24")
    description: str = Field(default="", max_length=2000)
    base: dict[str, Any] = Field(default_factory=dict)
    # Named combinations of fields, each one cell of every grid point: for what a product grid cannot
    # say, such as strategies that each need their own workers or replicas.
    setups: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_VALUES)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    repeats: int = Field(default=1, ge=1, le=MAX_REPEATS)
    # The order the cells run in. "grouped": a point's repeats one after another. "rotated": one repeat of every
    # point, then the next, each round starting one point later, so that a ratio between points (T(N)/T(1)) pairs
    # runs measured minutes apart, not a whole sweep apart, and no point always runs first or last.
    order: Literal["grouped", "rotated"] = "grouped"
    quick: dict[str, Any] = Field(default_factory=dict)
    report: ReportOptions = Field(default_factory=lambda: ReportOptions())

    @model_validator(mode="before")
    @classmethod
    def _flag_names(cls, data: Any) -> Any:
        """The file's flag names as the spec's: in base, quick, the grid, every setup and the report's baseline."""
        if not isinstance(data, dict):
            return data
        data = {k: _spec_names(v, f"{k}: ") if k in ("base", "quick", "grid") else v for k, v in data.items()}
        if isinstance(data.get("setups"), list):
            data["setups"] = [_spec_names(s, "setups: ") for s in data["setups"]]
        if isinstance(data.get("report"), dict):
            data["report"] = {**data["report"], "baseline": _spec_names(data["report"].get("baseline", {}),
                                                                        "report.baseline: ")}
        return data

    @field_validator("base", "quick")
    @classmethod
    def _known_fields(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        allowed = set(SWEEPABLE) | ({"repeats"} if info.field_name == "quick" else set())
        unknown = sorted(str(k) for k in value if k not in allowed)
        if unknown:
            raise ValueError(_unknown(unknown[0]))
        repeats = value.get("repeats", 1)
        if type(repeats) is not int or not 1 <= repeats <= MAX_REPEATS:
            raise ValueError(f"repeats: a whole number from 1 to {MAX_REPEATS}, got {shown(repeats)}")
        return value

    @field_validator("grid")
    @classmethod
    def _grid_axes(cls, value: dict[str, list[Any]]) -> dict[str, list[Any]]:
        check_grid(value)
        return value

    @field_validator("setups")
    @classmethod
    def _setup_fields(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        keys = []
        for setup in value:
            unknown = sorted(str(k) for k in setup if k not in SWEEPABLE)
            if not setup:
                raise ValueError("a setup names fields to set; got none")
            if unknown:
                raise ValueError(_unknown(unknown[0], " in a setup"))
            keys.append(setup_key(setup))
            if keys[-1] in keys[:-1]:
                raise ValueError(f"the setup {shown(keys[-1])} appears twice")
        return value


@dataclass(frozen=True)
class Cell:
    """One run of a sweep: a point of the grid and a repeat."""

    key: str
    params: dict[str, Any]
    repeat: int
    fields: dict[str, Any]


def check_grid(grid: Mapping[str, list[Any]], times: int = 1) -> None:
    """ValueError (one line) unless every axis is sweepable with 1 to 50 values of distinct cell keys, the grid
    has at most 500 cells, and those ``times`` (setups × repeats) at most MAX_TOTAL_CELLS: before any work."""
    cells = 1
    for key, values in grid.items():
        if key not in SWEEPABLE:
            raise ValueError(f"cannot sweep {_unknown(key).removeprefix('unknown field ')}")
        if not values:
            raise ValueError(f"{key}: needs at least one value")
        if len(values) > MAX_VALUES:
            raise ValueError(f"{key}: at most {MAX_VALUES} values")
        _axis_parts(key, values)
        cells *= len(values)
    if cells > MAX_CELLS:
        raise ValueError(f"the grid has {cells} cells; at most {MAX_CELLS}")
    if cells * times > MAX_TOTAL_CELLS:
        raise ValueError(f"{cells * times:,} cells (setups × grid × repeats); at most {MAX_TOTAL_CELLS:,} in one file")


def load(path: Path) -> Experiment:
    """Read and validate an experiment file; every problem is a one-line InvalidSpec naming the field.

    A bounded read: a FIFO, device, folder or file over MAX_BYTES is refused, never waited on."""
    try:
        data = read_bounded(Path(os.path.realpath(path)), MAX_BYTES)
    except (Unsafe, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidSpec(_line(f"cannot read experiment file {path}: {why}")) from None
    if data is None:
        raise InvalidSpec(_line(f"cannot read experiment file {path}: no such file"))
    try:
        return parse(data.decode("utf-8"), str(path), Path(os.path.realpath(path)).parent)
    except UnicodeDecodeError:
        raise InvalidSpec(_line(f"{path}: not UTF-8 text")) from None


def _scripts_from(doc: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """``doc`` with its path fields (`script`, `source`; in base, setups and grid) made absolute against the
    file's folder."""
    doc = dict(doc)
    for name in ("script", "source"):
        if isinstance(doc.get("base"), dict) and name in doc["base"]:
            doc["base"] = {**doc["base"], name: absolute(doc["base"][name], base_dir)}
        if isinstance(doc.get("setups"), list):
            doc["setups"] = [{**s, name: absolute(s[name], base_dir)} if isinstance(s, dict) and name in s
                             else s for s in doc["setups"]]
        if isinstance(doc.get("grid"), dict) and isinstance(doc["grid"].get(name), list):
            doc["grid"] = {**doc["grid"], name: [absolute(s, base_dir) for s in doc["grid"][name]]}
    return doc


def parse(text: str, source: str = "experiment", base_dir: Optional[Path] = None) -> Experiment:
    """Validate experiment YAML text, and every cell of it (also in quick mode) as a spec; a relative
    `script` is relative to ``base_dir``, the experiment file's folder."""
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise InvalidSpec(_line(f"{source}: larger than {MAX_BYTES // 1024} KiB; an experiment file is a few KiB"))
    try:
        doc = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
        raise InvalidSpec(_line(f"{source}: not valid YAML" + (f" at line {mark.line + 1}" if mark else "")
                                + (f": {problem[:100]}" if problem else ""))) from None
    except (ValueError, OverflowError, RecursionError) as exc:  # e.g. a 5,000-digit number, a 30 February
        raise InvalidSpec(_line(f"{source}: not valid YAML: {str(exc)[:100]}")) from None
    if not isinstance(doc, dict):
        raise InvalidSpec(f"{source}: must be a mapping with name, base, grid, repeats, quick and report")
    if base_dir is not None:
        doc = _scripts_from(doc, base_dir)
    try:
        experiment = Experiment(**{str(k): v for k, v in doc.items()})
    except ValidationError as exc:
        problems = describe_all(exc, lambda: sorted(Experiment.model_fields), lambda field: EXAMPLES.get(field))
        raise InvalidSpec(_line(f"{source}: {say(problems[:1], SPEC_ONLY.get)}")) from None
    except TypeError as exc:
        raise InvalidSpec(_line(f"{source}: {exc}")) from None
    try:  # every cell must be a valid spec before anything runs
        cells = expand(experiment)
        expand(experiment, quick=True)
    except InvalidSpec as exc:
        raise InvalidSpec(_line(f"{source}: {exc.message}")) from None
    baseline = experiment.report.baseline
    if baseline and not any(all(c.fields.get(k) == v for k, v in baseline.items()) for c in cells):
        shown_baseline = ", ".join(f"{SPEC_ONLY.get(k, k)}: {shown(v)}" for k, v in baseline.items())
        raise InvalidSpec(_line(f"{source}: report.baseline: {{{shown_baseline}}} is no cell of the grid; name one "
                                "that is, e.g. the first setup or the smallest grid value"))
    return experiment


def _line(text: str) -> str:  # a one-line error: line breaks escaped, at most MAX_MESSAGE characters
    return one_line(text, MAX_MESSAGE)


def _tenth(samples: Any) -> Any:
    try:
        return max(3000, int(samples) // 10)
    except (TypeError, ValueError, OverflowError):  # make_spec names the problem
        return samples


def _scaled_quick(experiment: Experiment) -> tuple[dict[str, Any], dict[str, list[Any]], int]:
    """The base, grid and repeats of --quick: the file's `quick` section, or a tenth of the samples, 1 epoch."""
    base, grid = dict(experiment.base), {k: list(v) for k, v in experiment.grid.items()}
    quick = dict(experiment.quick)
    repeats = quick.pop("repeats", 1)
    scripts = "script" in base or "script" in grid or any("script" in setup for setup in experiment.setups)
    if not experiment.quick and not scripts:  # a script's own arguments decide its size
        quick = {"epochs": 1}
        if "samples" in grid:
            tenths = [_tenth(s) for s in grid["samples"]]
            scaled = [v for i, v in enumerate(tenths) if v not in tenths[:i]]
            grid["samples"] = sorted(scaled) if all(type(v) is int for v in scaled) else scaled
        else:
            base["samples"] = _tenth(base.get("samples", 60000))
    for key, value in quick.items():
        if key in grid:
            grid[key] = value if isinstance(value, list) else [value]
        else:
            base[key] = value
    return base, grid, repeats


def expand(experiment: Experiment, quick: bool = False) -> list[Cell]:
    """Every cell of the grid times the repeats, each with its fields validated as a spec with the run id
    the sweep will give it (``cell_run_id``, with a token of zeros)."""
    if quick:
        base, grid, repeats = _scaled_quick(experiment)
    else:
        base, grid, repeats = dict(experiment.base), experiment.grid, experiment.repeats
    try:
        check_grid(grid, len(experiment.setups or [{}]) * repeats)
    except ValueError as exc:
        raise InvalidSpec(_line(f"{'quick: ' if quick else ''}{exc}")) from None
    axes = list(grid)
    parts = [_axis_parts(a, grid[a]) for a in axes]
    overlap = sorted({k for s in experiment.setups for k in s} & set(axes))
    if overlap:
        raise InvalidSpec(_line(f"setups: {overlap[0]} is both in a setup and on the grid; put it in one"))
    cells = []
    for setup, point in itertools.product(experiment.setups or [{}],
                                          itertools.product(*(range(len(grid[a])) for a in axes))):
        params = {**setup, **{a: grid[a][i] for a, i in zip(axes, point)}}
        fields = {**base, **params}
        for repeat in range(repeats):
            key = "-".join([*([setup_key(setup)] if setup else []), *(parts[j][i] for j, i in enumerate(point)),
                            f"r{repeat}"])
            try:
                make_spec(**fields, run_id=cell_run_id(experiment.name, key, repeat, "0" * TOKEN_HEX))
            except InvalidSpec as exc:
                raise InvalidSpec(_line(f"cell {key}: {exc.message}")) from None
            cells.append(Cell(key=key, params=params, repeat=repeat, fields=fields))
    return rotated(cells, repeats) if experiment.order == "rotated" else cells


def rotated(cells: list[Cell], repeats: int) -> list[Cell]:
    """``cells`` (each point's repeats in turn) as rounds: repeat r of every point, starting at point r."""
    points = [cells[i:i + repeats] for i in range(0, len(cells), repeats)]
    return [points[(start + r) % len(points)][r] for r in range(repeats) for start in range(len(points))]


