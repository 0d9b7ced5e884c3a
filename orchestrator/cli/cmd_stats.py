"""`orch stats`: live resource figures of a running run."""
from __future__ import annotations

from dataclasses import asdict
from typing import Optional

import click

from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import complete_run_ids, format_option
from orchestrator.cli.tables import stats_table


@click.command()
@click.argument("run", required=False, shell_complete=complete_run_ids)
@click.option("--interval", type=click.FloatRange(min=1.0), default=1.0, show_default=True, help="Seconds between updates.")
@format_option
@pass_env
def stats(env: Environment, run: Optional[str], interval: float, fmt: str) -> None:
    """Live CPU (100 = one core), memory, network and disk figures per container of a running RUN.

    RUN defaults to the newest run. On a terminal the table updates until the run ends or you press
    Ctrl-C; otherwise (or with --format json) one snapshot is printed.
    """
    from rich.live import Live

    from orchestrator.run.runs import stats_snapshots

    run_id, snapshots = stats_snapshots(run, interval)
    if fmt == "json" or not env.stdout_isatty:
        snapshot = next(snapshots, {})
        snapshots.close()
        if fmt == "json":
            env.json([asdict(s) for s in snapshot.values()])
        else:
            env.out.print(stats_table(run_id, snapshot))
        return
    with Live(stats_table(run_id, {}), console=env.out, refresh_per_second=2) as live:
        for snapshot in snapshots:
            live.update(stats_table(run_id, snapshot))
