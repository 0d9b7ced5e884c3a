"""`orch track`: log finished runs, or a sweep, to MLflow and TensorBoard afterwards."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import complete_run_ids, tracked_targets
from orchestrator.errors import EXIT_USAGE


@click.command()
@click.argument("runs", nargs=-1, required=True, shell_complete=complete_run_ids)
@click.option("--to", "to", metavar="mlflow,tensorboard", default="mlflow,tensorboard", show_default=True,
              help="Where to log them (comma-separated).")
@click.option("--tracking-uri", metavar="URI", envvar="MLFLOW_TRACKING_URI", show_envvar=True,
              help="The MLflow tracking server or store. [default: SQLite in the results folder]")
@pass_env
def track(env: Environment, runs: tuple[str, ...], to: str, tracking_uri: Optional[str]) -> None:
    """Log finished RUNS (run ids, or a sweep's results folder holding cells.json) to MLflow and TensorBoard.

    For runs a tracker missed (`orch up --track` while the server was down) or runs never tracked. Each orch
    run becomes one MLflow run, exactly once: a run already logged whole is skipped, a half-logged one is
    logged again. A sweep becomes an MLflow experiment with a parent run and a child run per cell.
    Exits 2 when a tracker could not be reached (the runs are untouched).

    \b
    orch track w1 w3
    orch track results/container-count-quick --to mlflow --tracking-uri http://127.0.0.1:5000
    """
    from orchestrator.experiments.sweep import CELLS_FILE
    from orchestrator.paths import default_paths
    from orchestrator.run.rundir import resolve
    from orchestrator.tracking import track_run, track_sweep

    targets = tracked_targets(to, "--to")
    if not targets:
        raise click.BadParameter("name a tracker, e.g. --to mlflow", param_hint="'--to'")
    paths = default_paths()
    ok = True
    for name in runs:
        folder = Path(name)
        if (folder / CELLS_FILE).is_file():
            ok &= track_sweep(folder, targets, uri=tracking_uri, paths=paths, say=env.say)
            continue
        run = resolve(paths, name)  # RunNotFound, one line, for a name that is neither
        ok &= track_run(run.run_id, targets, uri=tracking_uri, paths=paths, say=env.say)
    if not ok:
        click.get_current_context().exit(EXIT_USAGE)
