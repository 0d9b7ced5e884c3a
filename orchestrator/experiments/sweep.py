"""`orch experiment`: sweeps of job specs over a grid, with repeats, resume, and a report.

The file's model, its parsing and the grid's cells live in ``experiment_file``; this module runs the
cells, records each in cells.json, and writes the report.
"""
from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from orchestrator.analysis import machine, metrics, report
from orchestrator.analysis.collect import collect
from orchestrator.docker.engine import engine_address
from orchestrator.docker.engines import DEFAULT as DEFAULT_ENGINE
from orchestrator.errors import ComposeMissing, DataError, EngineUnreachable, ImageMissing, InvalidSpec, OrchError
from orchestrator.experiments import floor
from orchestrator.experiments.cells import TOKEN_HEX, Cell, expand
from orchestrator.experiments.keys import cell_run_id
from orchestrator.experiments.model import Experiment
from orchestrator.jobspec import make_spec
from orchestrator.paths import Paths, default_paths
from orchestrator.run import start
from orchestrator.run.rundir import read_json
from orchestrator.safeio import locked, write_json
from orchestrator.safetext import one_line

CELLS_FILE = "cells.json"
# Errors of the host, not of a cell: every later cell would fail the same way, so the sweep stops.
FATAL = (EngineUnreachable, ImageMissing, ComposeMissing, DataError)


def results_dir(experiment: Experiment, quick: bool, root: Optional[Path] = None) -> Path:
    """Where an experiment's cells, runs and report go: ``<root>/<name>[-quick]``; root None is the
    default results root (``default_paths().results``)."""
    return (default_paths().results if root is None else Path(root)) / (experiment.name + ("-quick" if quick else ""))


def load_cells(out: Path) -> dict[str, Any]:
    """The recorded state of every cell run so far ({} if none is recorded)."""
    cells = read_json(out / CELLS_FILE)
    return cells if isinstance(cells, dict) else {}


def machine_of(cell: Cell, known: Optional[dict[str, dict[str, Any]]] = None) -> dict[str, Any]:
    """The machine ``cell``'s containers run on (``machine.where_cells_run``), looked up once per backend in
    ``known``."""
    backend = str(cell.fields.get("backend", "compose"))
    engine = cell.fields.get("engine")
    where = f"{backend}/{engine or ''}"
    known = {} if known is None else known
    if where not in known:
        # A cell whose fields name no engine runs on Docker (``expand`` names any other; Swarm's is Docker's).
        known[where] = machine.where_cells_run(backend, engine_address(str(engine or DEFAULT_ENGINE)))
    return known[where]


DONE, TO_RUN, ELSEWHERE = "done, skipped", "to run", "to run: done on another machine"


def status(record: Optional[dict[str, Any]], cell: Cell, machine_id: str) -> str:
    """What a resumed sweep does with a cell: skip it (DONE), run it (TO_RUN), or run it again because its
    figures come from another machine, or from one orch did not record (ELSEWHERE): repeats from two
    processors in one median would compare them quietly."""
    if not record or record.get("state") != "succeeded" or record.get("fields") != cell.fields:
        return TO_RUN
    measured = record.get("machine")
    return DONE if isinstance(measured, dict) and measured.get("id") == machine_id else ELSEWHERE


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
        """Seconds until the last cell ends, from the cells so far; None before the first and after the last
        (what follows the cells, such as the transport floors, is not estimated)."""
        if not self.durations or self.done >= self.total:
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
    engine: Optional[str] = None,
) -> tuple[Path, dict[str, Any]]:
    """Run every cell not already done; record each (failed ones too); write the report. Returns (dir, cells).
    ``engine``: the container engine of the Compose cells whose file names none (None: $ORCH_ENGINE, else Docker).

    Runs go under ``paths.runs``; the experiment's folder under ``root`` (None: ``paths.results``). The folder
    is locked for the whole sweep (a second sweep of it fails at once with FolderBusy, changing nothing), and
    every file in it is written atomically. Each cell is collected into ``<folder>/runs``, which collect
    locks on its own.
    """
    paths = paths or default_paths()
    cells = expand(experiment, quick, engine)
    out = results_dir(experiment, quick, paths.results if root is None else root)
    with locked(out, "a sweep"):
        write_json(out / "experiment.json", experiment.model_dump())
        recorded = load_cells(out)  # with force too: a cell's record is replaced only when it has run again
        _sweep(experiment, cells, recorded, out, force, paths, say or (lambda _m: None),
               on_progress or (lambda _p: None))
        current = {c.key: recorded[c.key] for c in cells if c.key in recorded}
        _reports(experiment, quick, current, out, say or (lambda _m: None), rewrite=False)
    return out, current


def rewrite_report(experiment: Experiment, quick: bool = False, root: Optional[Path] = None,
                   say: Optional[Callable[[str], None]] = None, paths: Optional[Paths] = None) -> tuple[Path, dict[str, Any]]:
    """Write the report of the cells already recorded (cells.json) again, running nothing: report.md and its plots
    as this orch draws them, and report.html where the sweep's collected runs are still beside it. Returns (dir,
    cells)."""
    paths = paths or default_paths()
    out = results_dir(experiment, quick, paths.results if root is None else root)
    recorded = load_cells(out)
    current = {c.key: recorded[c.key] for c in expand(experiment, quick) if c.key in recorded}
    if not current:
        raise InvalidSpec(f"{out} holds no recorded cell of {experiment.name}; run it first: "
                          f"orch experiment run FILE{' --quick' if quick else ''}")
    with locked(out, "a sweep"):
        _reports(experiment, quick, current, out, say or (lambda _m: None), rewrite=True)
    return out, current


def _reports(experiment: Experiment, quick: bool, cells: dict[str, Any], out: Path, say: Callable[[str], None],
             rewrite: bool) -> None:
    """report.md, its plots and report.html of ``cells``. Written again (``rewrite``) where a collected run is
    missing (a committed sweep keeps its cells.json, not its runs), report.html is drawn again from the runs it
    embeds, and left as it is if it holds none that can be read."""
    rows = metrics.aggregate(cells, experiment.report.scale, experiment.report.baseline)
    report.write_experiment_report(experiment, quick, cells, rows, out)
    missing = [key for key, c in cells.items() if isinstance(c, dict) and c.get("summary")
               and not (out / "runs" / str(c.get("run_id")) / "summary.json").is_file()]
    if rewrite and missing and (out / "report.html").is_file():
        from orchestrator.analysis import html

        why = f"the collected runs of {len(missing)} cells are not in {out / 'runs'}"
        try:
            html.rerender(out / "report.html", _title(experiment, quick, rows), _note(experiment), rows,
                          _axis(experiment), experiment.report.scale, metrics.cells_cores(cells),
                          {str(c["run_id"]): c["summary"] for c in cells.values() if isinstance(c, dict)
                           and c.get("run_id") and isinstance(c.get("summary"), dict)})
            say(f"report.html drawn again from the runs it holds: {why}")
        except Exception as exc:  # noqa: BLE001 - report.md is the report of record; the HTML view is extra
            say(f"report.html left as it was: {why}, and it holds none to draw again ({_reason(exc)})")
        return
    _html_report(experiment, quick, cells, rows, out, say)


def _title(experiment: Experiment, quick: bool, rows: list[dict[str, Any]]) -> str:
    return report.title(experiment, rows) + (" (quick mode)" if quick else "")


def _note(experiment: Experiment) -> str:
    return experiment.description.strip()[:2000]


def _axis(experiment: Experiment) -> Optional[str]:
    """What N counts in report.html's charts against it: None for setups against a named one."""
    return None if experiment.report.baseline else "containers" if experiment.report.scale == metrics.SCALE \
        else experiment.report.scale


def _html_report(experiment: Experiment, quick: bool, cells: dict[str, Any], rows: list[dict[str, Any]], out: Path,
                 say: Callable[[str], None]) -> None:
    """report.html beside report.md: every collected cell, interactive, its N, speedup and bound reckoned as
    report.md's (``rows``, from ``metrics.aggregate``), which its charts against N draw; skipped (with report.md
    intact) if a cell's folder cannot be read."""
    from orchestrator.analysis import html

    folders = [(out / "runs" / str(c["run_id"]), key) for key, c in sorted(cells.items())
               if isinstance(c, dict) and c.get("run_id") and (out / "runs" / str(c["run_id"]) / "summary.json").is_file()]
    try:
        floors = {str(c["run_id"]): c["floor"]["floor"] for c in cells.values() if isinstance(c, dict)
                  and isinstance(c.get("floor"), dict) and metrics.is_seconds(c["floor"].get("floor"))}
        html.write(out / "report.html", _title(experiment, quick, rows), folders, note=_note(experiment),
                   floors=floors, against=against(cells, rows), axis=_axis(experiment), rows=rows,
                   scale=experiment.report.scale)
    except Exception as exc:  # noqa: BLE001 - report.md is the report of record; the HTML view is extra
        (out / "report.html").unlink(missing_ok=True)
        say(f"no HTML report: {_reason(exc)}")


def against(cells: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, tuple[int, Any, Any]]:
    """Each cell's run id: its grid point's N, T(1) and CPU bound, as report.md reckons them (``rows``, from
    ``metrics.aggregate``), for report.html."""
    by_point = {metrics.point_id(r["params"]): r for r in rows}
    out = {}
    for c in cells.values():
        params = c.get("params") if isinstance(c, dict) else None
        row = by_point.get(metrics.point_id(params)) if isinstance(params, dict) else None  # {} too: one point
        if row is not None and c.get("run_id"):
            out[str(c["run_id"])] = (row["n"], row["base_seconds"], row["cpu_bound"])
    return out


def _reason(exc: Exception) -> str:
    """Why a cell failed, in one line: an OrchError's message, or what went wrong unexpectedly."""
    text = exc.message if isinstance(exc, OrchError) else f"internal error: {type(exc).__name__}: {exc}"
    return one_line(text)


def _sweep(experiment: Experiment, cells: list[Cell], recorded: dict[str, Any], out: Path, force: bool, paths: Paths,
           say: Callable[[str], None], on_progress: Callable[[Progress], None]) -> None:
    """Run the cells not done in ``recorded`` (every cell with ``force``), recording each there and in cells.json
    as it ends."""
    progress = Progress(total=len(cells))
    known: dict[str, dict[str, Any]] = {}
    for cell in cells:
        progress.current = cell.key
        here = machine_of(cell, known)
        now = status(recorded.get(cell.key), cell, here["id"])
        if not force and now == DONE:
            if experiment.report.floor and floor.needed(recorded[cell.key]):  # asked for later, or failed before
                _floor_beside(experiment, cell, recorded[cell.key], out, recorded, paths, say)
            progress.done += 1
            progress.skipped += 1
            continue
        if not force and now == ELSEWHERE:
            were = recorded[cell.key].get("machine")
            say(f"cell {cell.key} was measured on " + (f"another machine ({machine.describe(were)})"
                                                       if isinstance(were, dict) else
                "a machine orch did not record") + "; running it again here")
        on_progress(progress)
        run_id = cell_run_id(experiment.name, cell.key, cell.repeat, secrets.token_hex(TOKEN_HEX // 2))
        spec = make_spec(**cell.fields, run_id=run_id)
        started = time.monotonic()
        record: dict[str, Any] = {"params": cell.params, "repeat": cell.repeat, "fields": cell.fields,
                                  "run_id": run_id, "started": time.time(), "machine": here}
        try:
            start.up(spec, paths=paths, say=say)
            record["state"] = "succeeded"
        except FATAL:
            raise
        except KeyboardInterrupt:
            record["state"] = "interrupted"
            recorded[cell.key] = record
            write_json(out / CELLS_FILE, recorded)
            raise
        except Exception as exc:  # noqa: BLE001 - one bad cell fails that cell, never the sweep
            record.update(state="failed", error=_reason(exc))
            progress.failed += 1
            say(f"cell {cell.key} failed: {record['error']}; going on")
        try:
            record["summary"] = collect([run_id], out_root=out / "runs", paths=paths)[0]
        except Exception as exc:  # noqa: BLE001 - as above: the cell is recorded, the sweep goes on
            record["collect_error"] = _reason(exc)
        recorded[cell.key] = record
        write_json(out / CELLS_FILE, recorded)
        if experiment.report.floor and record["state"] == "succeeded":
            _floor_beside(experiment, cell, record, out, recorded, paths, say)
        progress.done += 1
        progress.durations.append(time.monotonic() - started)
    if experiment.report.floor:
        progress.current = "the transport floors"
        on_progress(progress)
        floor.transport_floors([recorded[c.key] for c in cells if c.key in recorded], paths, say)
        write_json(out / CELLS_FILE, recorded)
    progress.current = "finished"
    on_progress(progress)


def _floor_beside(experiment: Experiment, cell: Cell, record: dict[str, Any], out: Path, recorded: dict[str, Any],
                  paths: Paths, say: Callable[[str], None]) -> None:
    """Run the solo rank of ``cell``'s floor right after it (``floor.solo``) and record it in ``record["floor"]``
    (a cell of one rank is its own: ``floor.itself``); a floor that cannot be had records why, and the sweep goes
    on."""
    spec = make_spec(**cell.fields, run_id=record["run_id"])
    reason = floor.why_none(spec)
    seconds = (record.get("summary") or {}).get("train_seconds")
    if reason:
        record["floor"] = {"none": reason}
    elif floor.ranks(spec) == 1 and metrics.is_seconds(seconds) and seconds:  # one rank: the cell is its own floor
        record["floor"] = floor.itself(spec, seconds)
    else:
        run_id = cell_run_id(experiment.name, cell.key + "-floor", cell.repeat, secrets.token_hex(TOKEN_HEX // 2))
        say(f"cell {cell.key}: its floor, one rank alone at the per-rank batch ({run_id})")
        try:
            record["floor"] = floor.solo(cell.fields, run_id, paths, start.up)
        except FATAL:
            raise
        except Exception as exc:  # noqa: BLE001 - the cell's own figures stand without its floor
            record["floor"] = {"error": _reason(exc)}
            say(f"cell {cell.key}: no floor: {record['floor']['error']}")
    write_json(out / CELLS_FILE, recorded)
