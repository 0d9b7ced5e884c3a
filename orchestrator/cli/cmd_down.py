"""`orch down`: remove a run's containers and network."""
from __future__ import annotations

import click
from rich.text import Text

from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import complete_run_ids, engine_option, format_option


@click.command()
@click.argument("runs", nargs=-1, shell_complete=complete_run_ids)
@click.option("--all", "all_runs", is_flag=True, help="Take down every run that still has containers.")
@format_option
@engine_option
@pass_env
def down(env: Environment, runs: tuple[str, ...], all_runs: bool, fmt: str) -> None:
    """Remove the containers and network of RUNS; their results stay in runs/<run-id>/."""
    
    from orchestrator.run.runs import down as take_down

    taken = take_down(list(runs), all_runs=all_runs)
    if fmt == "json":
        env.json([{"run_id": run_id, "state": "down"} for run_id in taken])
        return
    for run_id in taken:
        env.out.print(Text(f"{run_id} down"))
