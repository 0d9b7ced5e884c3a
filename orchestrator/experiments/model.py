"""An experiment file's model: its fields, their limits and names, and the checks a grid passes before any work.

A file names fields as the flags do (batch_size); the loaded model holds the spec's names (global_batch), which
cells.json records and cell keys are made of. Every problem is a ValueError that ``file.parse`` turns into a
one-line InvalidSpec naming the field.
"""
from __future__ import annotations

import difflib
from typing import Any, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from orchestrator.experiments.keys import _axis_parts, setup_key
from orchestrator.jobspec import JobSpec, flat_field_names, shown
from orchestrator.jobspec.fields import flag_aliases
from orchestrator.safetext import one_line

EXAMPLES = {"repeats": "3", "name": "my-sweep", "grid": "{workers: [1, 2, 3]}"}  # for errors about the file itself
NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,23}$"
MAX_BYTES = 64 << 10  # of an experiment file (a valid one is at most ~40 KiB); pure-Python YAML reads it in < 1 s
MAX_DEPTH = 32  # nesting of its YAML
MAX_MESSAGE = 400  # characters of an error about it
MAX_VALUES, MAX_CELLS, MAX_REPEATS, MAX_TOTAL_CELLS = 50, 500, 20, 1000  # a grid's cells; a file's, all told
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


def message_line(text: str) -> str:
    """A one-line error about a file: line breaks escaped, at most MAX_MESSAGE characters."""
    return one_line(text, MAX_MESSAGE)
