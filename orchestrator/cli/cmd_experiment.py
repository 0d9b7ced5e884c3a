"""`orch experiment`: sweeps of training jobs described in a YAML file."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import (Verbs, complete_experiment_files, engine_option, format_option, track_options,
                                      tracked_targets)
from orchestrator.cli.tables import cells_table, experiments_table, past_cells_table
from orchestrator.errors import EXIT_FAILED


@click.group(cls=Verbs)
def experiment() -> None:
    """Sweeps of training jobs described in a YAML file: a grid of fields, repeats, and a report of every cell."""


@experiment.command("run")
@click.argument("file", type=click.Path(dir_okay=False), shell_complete=complete_experiment_files)
@click.option("--quick", is_flag=True, help="Scaled down (the file's `quick:` section) for a demo or CI.")
@click.option("--force", is_flag=True, help="Run every cell again, even those already done.")
@click.option("--dry-run", is_flag=True, help="List the cells and their specs; run nothing.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Folder that receives <experiment>/. [default: $ORCH_RESULTS_DIR, else results]")
@engine_option
@track_options
@format_option
@pass_env
def experiment_run(env: Environment, file: str, quick: bool, force: bool, dry_run: bool,
                   out_dir: Optional[str], track: Optional[str], tracking_uri: Optional[str], fmt: str) -> None:
    """Run every cell of the experiment in FILE and write results/<name>/report.md.

    Each cell is one `orch up` plus `orch collect`. Re-running skips the cells that already succeeded
    with the same spec on this machine (unless --force), so an interrupted sweep resumes; cells measured
    on another machine (another processor, instruction set or core count) run again, so that no median
    mixes two machines. A failed cell is recorded and the sweep goes on; the report shows it, and the exit code
    is 1. With `report: {floor: true}` in FILE, each cell is followed by one rank alone at the per-rank batch,
    and the transports' all-reduce is measured after the cells: the report shows T(N) against this machine's
    floor.
    """
    from orchestrator import api
    from orchestrator.experiments import file as experiment_file
    from orchestrator.experiments.cells import expand
    from orchestrator.experiments.model import SPEC_ONLY
    from orchestrator.experiments import sweep as experiments
    from orchestrator.paths import default_paths

    root = Path(out_dir) if out_dir else default_paths().results
    targets = tracked_targets(track)
    exp = experiment_file.load(Path(file))
    if dry_run:
        cells = expand(exp, quick)
        recorded = {} if force else experiments.load_cells(experiments.results_dir(exp, quick, root))
        known: dict[str, Any] = {}
        status = {c.key: experiments.status(recorded.get(c.key), c, experiments.machine_of(c, known)["id"])
                  for c in cells}
        if fmt == "json":
            names = SPEC_ONLY
            env.json([{"cell": c.key, "status": status[c.key], "repeat": c.repeat,
                                  "fields": {names.get(k, k): v for k, v in c.fields.items()}} for c in cells])
        else:
            env.out.print(cells_table(exp.name, cells, status))
            if exp.report.floor:
                env.out.print("report: {floor: true}: after each cell, one rank alone at the per-rank batch; after "
                              "the cells, each transport's all-reduce once per N")
        return
    show = _ProgressView(env, exp.name)
    with show.progress:
        done = api.experiment(file, quick=quick, force=force, out=root, on_progress=show,
                              say=env.say if not env.stderr_isatty else None)
    failed = len(done.failed)
    if targets:
        from orchestrator.tracking import track_sweep

        track_sweep(done.folder, targets, uri=tracking_uri, say=env.say)
    env.say(f"report: {done.report}" + (f" ({failed} failed cells)" if failed else ""))
    if fmt == "json":
        env.json({"experiment": exp.name, "folder": str(done.folder), "report": str(done.report),
                             "failed": done.failed, "cells": done.cells})
    else:
        env.out.print(Text(str(done.report)), soft_wrap=True)
    if failed:  # the report is written; the exit code says not every cell succeeded
        click.get_current_context().exit(EXIT_FAILED)


@experiment.command("report")
@click.argument("file", type=click.Path(dir_okay=False), shell_complete=complete_experiment_files)
@click.option("--quick", is_flag=True, help="The report of the file's `quick:` form.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Folder that holds <experiment>/. [default: $ORCH_RESULTS_DIR, else results]")
@pass_env
def experiment_report(env: Environment, file: str, quick: bool, out_dir: Optional[str]) -> None:
    """Write the report of the experiment in FILE again from the cells it recorded, running none.

    report.md and its plots are drawn from cells.json as this orch draws them (after an upgrade, say);
    report.html too, from the sweep's collected runs, or from the runs the page holds where those are gone.
    """
    from orchestrator import api
    from orchestrator.paths import default_paths

    root = Path(out_dir) if out_dir else default_paths().results
    done = api.experiment_report(file, quick=quick, out=root, say=env.say)
    env.say(f"report: {done.report} ({len(done.cells)} cells, none run)")
    env.out.print(Text(str(done.report)), soft_wrap=True)


class _ProgressView:
    """The sweep's progress on stderr: a bar on a terminal, a line per cell otherwise."""

    def __init__(self, env: Environment, name: str) -> None:
        self.env, self.name = env, name
        self.progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                                 TextColumn("{task.completed}/{task.total} cells"), TimeElapsedColumn(),
                                 TextColumn("{task.fields[eta]}"), console=env.err, disable=not env.stderr_isatty)
        self.task: Optional[Any] = None

    def __call__(self, p: Any) -> None:
        eta = "" if p.eta_seconds is None else (f"about {p.eta_seconds / 60:.0f} min to go" if p.eta_seconds >= 90
                                                else f"about {p.eta_seconds:.0f} s to go")
        if self.task is None:
            self.task = self.progress.add_task(self.name, total=p.total, eta=eta)
        self.progress.update(self.task, completed=p.done, description=f"{self.name}: {p.current}", eta=eta)
        if not self.env.stderr_isatty:
            now = "" if p.current == "finished" else f", now {p.current}"
            self.env.say(f"{self.name}: {p.done}/{p.total} cells done ({p.failed} failed, {p.skipped} skipped){now}"
                         + (f", {eta}" if eta and now else ""))


_root_option = click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
                            help="The folder holding experiment folders. [default: $ORCH_RESULTS_DIR, else results]")


@experiment.command("list")
@_root_option
@format_option
@pass_env
def experiment_list(env: Environment, out_dir: Optional[str], fmt: str) -> None:
    """List past sweeps (folders with a cells.json under the results folder), newest first."""
    from orchestrator.experiments.past import experiments
    from orchestrator.paths import default_paths

    found = experiments(Path(out_dir) if out_dir else default_paths().results)
    if fmt == "json":
        env.json([e.to_dict() for e in found])
        return
    if not found:
        env.say("no experiments yet; run one with `orch experiment run FILE`")
        return
    env.out.print(experiments_table(found))


@experiment.command("show")
@click.argument("name")
@_root_option
@format_option
@pass_env
def experiment_show(env: Environment, name: str, out_dir: Optional[str], fmt: str) -> None:
    """Show the cells of the past sweep NAME and where its reports are (report.md, and report.html to open in a
    browser)."""
    from orchestrator.experiments.past import find
    from orchestrator.paths import default_paths

    past = find(Path(out_dir) if out_dir else default_paths().results, name)
    if fmt == "json":
        env.json({**past.to_dict(), "cell_records": past.cells})
        return
    env.out.print(past_cells_table(past))
    for label, report in (("report", past.report("report.md")), ("interactive report", past.report("report.html"))):
        if report is not None:
            env.say(f"{label}: {report}")
