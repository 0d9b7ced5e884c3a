"""`orch ps`: the runs and their results."""
from __future__ import annotations


import click

from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import complete_run_ids, engine_option, format_option
from orchestrator.cli.tables import runs_table


@click.command()
@click.argument("runs", nargs=-1, shell_complete=complete_run_ids)
@format_option
@engine_option
@pass_env
def ps(env: Environment, runs: tuple[str, ...], fmt: str) -> None:
    """List runs (or the RUNS named) with their state and results, oldest first.

    Runs are read from their folders, so finished runs are listed with the engine stopped; the engine adds the
    live state of runs still up, and when it does not answer, one line on stderr says so."""
    from orchestrator.run.runs import ps as list_runs

    infos = list_runs(list(runs) or None, say=env.say)
    if fmt == "json":
        env.json([i.to_dict() for i in infos])
    elif not infos:
        env.say("no runs yet; start one with `orch up`")
    else:
        env.out.print(runs_table(infos))
