"""Experiment files: the model, its YAML (bounded and alias-free), cell keys and the grid's expansion.

An experiment file is YAML of at most MAX_BYTES, without anchors or aliases, at most MAX_DEPTH deep; each
problem in it is a one-line InvalidSpec. Cell keys map grid points into the run-id alphabet without
collisions; ``cell_run_id`` alone makes a run id of one, and ``expand`` (so --dry-run) validates that shape.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.errors import InvalidSpec
from orchestrator.jobspec import flat_field_names, make_spec, shown
from orchestrator.run.scripts import absolute
from orchestrator.safeio import Unsafe, read_bounded
from orchestrator.safetext import one_line

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,23}$"
MAX_BYTES = 64 << 10  # of an experiment file (a valid one is at most ~40 KiB); pure-Python YAML reads it in < 1 s
MAX_DEPTH = 32  # nesting of its YAML
MAX_MESSAGE = 400  # characters of an error about it
MAX_VALUES, MAX_CELLS, MAX_REPEATS, MAX_TOTAL_CELLS = 50, 500, 20, 1000  # a grid's cells; a file's, all told
TOKEN_HEX = 4  # the random suffix of a run id; expand validates with as many zeros
# Flat field names, as make_spec takes them: the generic fields and the framework's options. A run id is
# made per cell; roles follow from workers.
SWEEPABLE = sorted(set(flat_field_names()) - {"run_id", "roles"})


class _Loader(yaml.SafeLoader):
    """SafeLoader refusing anchors and aliases (a few hundred bytes of nested aliases expand to gigabytes)
    and nesting deeper than MAX_DEPTH, where the parser meets them."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
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
    accuracy: Optional[float] = Field(None, ge=0, le=100)
    seconds: Optional[float] = Field(None, ge=0)


class ReportOptions(BaseModel):
    """What the report shows beyond the measured table."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    title: str = Field("", max_length=200)
    # A scaling study (seed 002): speedup, efficiency and throughput per N, the loss curves, and the step time
    # split into compute and the all-reduce wait, where the trainer measures it.
    scaling: bool = False
    reference_title: str = Field("", max_length=200)
    reference: list[ReferenceRow] = Field(default_factory=list, max_length=50)
    notes: str = Field("", max_length=10_000)
    # The axis the scaling figures (T(N)/T(1), speedup, efficiency) are taken along: N containers, or N
    # replicas inside one (MirroredStrategy).
    scale: Literal["workers", "replicas"] = "workers"
    # Or one cell every other is compared with, named by its parameters (e.g. {strategy: single}): for
    # setups that differ in more than one field, such as strategies. N is then workers × replicas.
    baseline: dict[str, Any] = Field(default_factory=dict)


class Experiment(BaseModel):
    """An experiment file: a base spec, a grid to sweep, repeats, and what to report."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(..., pattern=NAME_PATTERN, description="lowercase letters, digits and -, at most 24")
    description: str = Field("", max_length=2000)
    base: dict[str, Any] = Field(default_factory=dict)
    # Named combinations of fields, each one cell of every grid point: for what a product grid cannot
    # say, such as strategies that each need their own workers or replicas.
    setups: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_VALUES)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    repeats: int = Field(1, ge=1, le=MAX_REPEATS)
    quick: dict[str, Any] = Field(default_factory=dict)
    report: ReportOptions = Field(default_factory=ReportOptions)

    @field_validator("base", "quick")
    @classmethod
    def _known_fields(cls, value: dict[str, Any], info) -> dict[str, Any]:
        allowed = set(SWEEPABLE) | ({"repeats"} if info.field_name == "quick" else set())
        unknown = sorted(str(k) for k in value if k not in allowed)
        if unknown:
            raise ValueError(f"unknown field {shown(unknown[0])}; allowed: {', '.join(sorted(allowed))}")
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
                raise ValueError(f"unknown field {shown(unknown[0])} in a setup; allowed: {', '.join(SWEEPABLE)}")
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
            raise ValueError(f"cannot sweep {shown(key)}; sweepable fields: {', '.join(SWEEPABLE)}")
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


def _canonical(value: Any) -> str:
    """``value`` as canonical JSON (sorted keys, no spaces); a tagged repr for what JSON cannot hold."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=lambda o: f"<{type(o).__name__}>{o!r}")
    except (TypeError, ValueError, RecursionError):  # mixed key types, an int too long to print, ...
        try:
            return f"<{type(value).__name__}>{value!r}"
        except (ValueError, RecursionError):
            return f"<{type(value).__name__}>"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def _value_slug(value: Any) -> str:
    """``value`` in the run-id alphabet: itself if a non-negative int below 10**12 or a lowercase word of at
    most 12 letters and digits (lossless, never containing ``_``); else a readable part, ``_`` and a hash of
    its canonical JSON, so that no two values share a slug."""
    if type(value) is int and 0 <= value < 10**12 or type(value) is str and re.fullmatch(r"[a-z][a-z0-9]{0,11}", value):
        return str(value)
    text = _canonical(value)
    if type(value) in (int, float):  # 0.001 -> 0p001, -1 -> m1
        text = text.replace(".", "p").replace("-", "m")
    elif isinstance(value, str):
        text = value
    readable = re.sub(r"[^a-z0-9]+", "", text[:200].lower())[:12] or "x"
    return f"{readable}_{_digest(_canonical(value))}"


def _axis_parts(axis: str, values: list[Any]) -> list[str]:
    """Each value's part of a cell key (``workers3``, ``learningrate0p001_1a2b3c4d``). ValueError if two
    values give the same part: the same value twice."""
    parts = [axis.replace("_", "") + _value_slug(value) for value in values]
    for i, part in enumerate(parts):
        if part in parts[:i]:
            raise ValueError(f"{axis}: the value {shown(values[i])} appears more than once")
    return parts


def setup_key(setup: Mapping[str, Any]) -> str:
    """A setup's part of a cell key: its fields' parts in field order (``strategymirrored-replicas2``)."""
    return "-".join(_axis_parts(k, [v])[0] for k, v in sorted(setup.items()))


def cell_run_id(name: str, key: str, repeat: int, token: str) -> str:
    """The run id of cell ``key`` of experiment ``name``: ``<name>-<key>-<token>``; if that is longer than 63,
    a readable prefix of the key, a hash of the whole key, the repeat and the token, so what tells cells apart
    is never cut."""
    whole = f"{name}-{key}-{token}"
    if len(whole) <= 63:
        return whole
    tail = f"{_digest(key)}-r{repeat}-{token}"
    prefix = key[:max(0, 63 - len(name) - len(tail) - 2)].rstrip("-_")
    return "-".join(p for p in (name, prefix, tail) if p)


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


def _scripts_from(doc: dict, base_dir: Path) -> dict:
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
        first = exc.errors(include_url=False)[0]
        loc = ".".join(shown(p) for p in first.get("loc", ())) or "experiment"
        msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        raise InvalidSpec(_line(f"{source}: {loc}: {msg}")) from None
    except TypeError as exc:
        raise InvalidSpec(_line(f"{source}: {exc}")) from None
    try:  # every cell must be a valid spec before anything runs
        expand(experiment)
        expand(experiment, quick=True)
    except InvalidSpec as exc:
        raise InvalidSpec(_line(f"{source}: {exc.message}")) from None
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
    if not experiment.quick:
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
    return cells


