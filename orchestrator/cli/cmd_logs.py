"""`orch logs`: every replica's output of a run, merged in time order."""
from __future__ import annotations

import re
from typing import Optional

import click
from rich.text import Text

from orchestrator.cli.env import Environment, pass_env

REPLICA_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta")


@click.command()
@click.argument("run", required=False)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the run ends.")
@click.option("-w", "--worker", "workers", type=int, multiple=True, help="Only this worker (repeatable).")
@click.option("--tail", type=int, help="Only the last N lines of each worker.")
@click.option("--since", help="Only lines since a duration ago (30s, 5m, 2h) or an ISO time.")
@click.option("--grep", "pattern", help="Only lines matching this regular expression.")
@click.option("--no-color", is_flag=True, help="No colours (also off when stdout is not a terminal).")
@click.option("--all", "show_all", is_flag=True, help="Include TensorFlow's C++ start-up noise.")
@pass_env
def logs(env: Environment, run: Optional[str], follow: bool, workers: tuple[int, ...], tail: Optional[int],
         since: Optional[str], pattern: Optional[str], no_color: bool, show_all: bool) -> None:
    """Show every worker's output of RUN (default: the newest run), merged in time order.

    Works for running runs (from the engine) and finished ones (from the logs saved in the run
    directory, so also after `orch down`).
    """
    from orchestrator.run.logs import LogFilter, parse_since
    from orchestrator.run.runs import read_logs

    try:
        grep = re.compile(pattern) if pattern else None
    except re.error as exc:
        raise click.BadParameter(f"not a regular expression: {exc}", param_hint="'--grep'")
    try:
        since_time = parse_since(since) if since else None
    except ValueError as exc:
        raise click.BadParameter(str(exc).removeprefix("--since: "), param_hint="'--since'")
    if tail is not None and tail < 0:
        raise click.BadParameter("must be 0 or more", param_hint="'--tail'")
    selection = LogFilter(workers=frozenset(workers), grep=grep, since=since_time, show_noise=show_all)
    _, records = read_logs(run, selection, tail=tail, follow=follow)
    colour = not no_color and env.stdout_isatty
    for record in records:
        style = REPLICA_COLOURS[record.worker % len(REPLICA_COLOURS)] if colour else ""
        env.out.print(Text(f"{record.replica} | ", style=style) + Text(record.line), soft_wrap=True)
