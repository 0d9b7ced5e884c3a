"""`orch down`: remove a run's containers and network."""
from __future__ import annotations

import click
from rich.text import Text

from orchestrator.cli.env import Environment, pass_env


@click.command()
@click.argument("runs", nargs=-1)
@click.option("--all", "all_runs", is_flag=True, help="Take down every run that still has containers.")
@pass_env
def down(env: Environment, runs: tuple[str, ...], all_runs: bool) -> None:
    """Remove the containers and network of RUNS; their results stay in runs/<run-id>/."""
    from orchestrator.run.runs import down as take_down

    for run_id in take_down(list(runs), all_runs=all_runs):
        env.out.print(Text(f"{run_id} down"))
