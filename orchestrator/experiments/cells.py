"""A sweep's cells: every point of the grid times the repeats (or the file's quick form), in the file's order, each
with its fields validated as the spec the sweep will run and naming the engine it runs on."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Optional

from orchestrator.backends.options import default_engine
from orchestrator.docker.engines import DEFAULT as DEFAULT_ENGINE
from orchestrator.errors import InvalidSpec
from orchestrator.experiments.keys import _axis_parts, cell_run_id, setup_key
from orchestrator.experiments.model import Experiment, check_grid, message_line
from orchestrator.jobspec import make_spec

TOKEN_HEX = 4  # the random suffix of a run id; expand validates with as many zeros


@dataclass(frozen=True)
class Cell:
    """One run of a sweep: a point of the grid and a repeat."""

    key: str
    params: dict[str, Any]
    repeat: int
    fields: dict[str, Any]


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


def expand(experiment: Experiment, quick: bool = False, engine: Optional[str] = None) -> list[Cell]:
    """Every cell of the grid times the repeats, each with its fields validated as a spec with the run id
    the sweep will give it (``cell_run_id``, with a token of zeros). A Compose cell runs on the engine the file
    names, else on ``engine``, else on $ORCH_ENGINE's, else on Docker; its fields name that engine where it is not
    Docker, so that a resumed sweep runs again, rather than skips, a cell measured on the other engine."""
    if quick:
        base, grid, repeats = _scaled_quick(experiment)
    else:
        base, grid, repeats = dict(experiment.base), experiment.grid, experiment.repeats
    try:
        check_grid(grid, len(experiment.setups or [{}]) * repeats)
    except ValueError as exc:
        raise InvalidSpec(message_line(f"{'quick: ' if quick else ''}{exc}")) from None
    axes = list(grid)
    parts = [_axis_parts(a, grid[a]) for a in axes]
    overlap = sorted({k for s in experiment.setups for k in s} & set(axes))
    if overlap:
        raise InvalidSpec(message_line(f"setups: {overlap[0]} is both in a setup and on the grid; put it in one"))
    cells = []
    for setup, point in itertools.product(experiment.setups or [{}],
                                          itertools.product(*(range(len(grid[a])) for a in axes))):
        params = {**setup, **{a: grid[a][i] for a, i in zip(axes, point)}}
        fields = {**base, **params}
        named = "engine" in fields or fields.get("backend", "compose") != "compose"
        asked: dict[str, Any] = {"engine": engine} if engine and not named else {}
        for repeat in range(repeats):
            key = "-".join([*([setup_key(setup)] if setup else []), *(parts[j][i] for j, i in enumerate(point)),
                            f"r{repeat}"])
            try:
                spec = make_spec(**fields, **asked, run_id=cell_run_id(experiment.name, key, repeat, "0" * TOKEN_HEX))
            except InvalidSpec as exc:
                raise InvalidSpec(message_line(f"cell {key}: {exc.message}")) from None
            ran_on = getattr(spec.backend_options, "engine", DEFAULT_ENGINE)
            # Named where it is not Docker, or where the fields alone ($ORCH_ENGINE's) would not give it.
            on = {"engine": ran_on} if not named and (ran_on != DEFAULT_ENGINE or ran_on != default_engine()) else {}
            cells.append(Cell(key=key, params=params, repeat=repeat, fields={**fields, **on}))
    return rotated(cells, repeats) if experiment.order == "rotated" else cells


def rotated(cells: list[Cell], repeats: int) -> list[Cell]:
    """``cells`` (each point's repeats in turn) as rounds: repeat r of every point, starting at point r."""
    points = [cells[i:i + repeats] for i in range(0, len(cells), repeats)]
    return [points[(start + r) % len(points)][r] for r in range(repeats) for start in range(len(points))]
