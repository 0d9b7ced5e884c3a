"""`orch logs`: every replica's output of a run, merged in time order."""
from __future__ import annotations

import re
from typing import Optional

import click
from rich.text import Text

from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import complete_run_ids

REPLICA_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta")


@click.command()
@click.argument("run", required=False, shell_complete=complete_run_ids)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the run ends.")
@click.option("-w", "--worker", "workers", type=int, multiple=True, help="Only this worker (repeatable).")
@click.option("--tail", type=int, help="Only the last N lines of each worker.")
@click.option("--since", help="Only lines since a duration ago (30s, 5m, 2h) or an ISO time.")
@click.option("--grep", "pattern", help="Only lines matching this regular expression.")
@click.option("--no-color", is_flag=True, help="No colours (also off when stdout is not a terminal).")
@click.option("--all", "show_all", is_flag=True, help="Include TensorFlow's C++ start-up noise.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one JSON object per line (replica, role, worker, stream, time, line), as the lines come.")
@click.option("--raw", is_flag=True, help="Write each line as stored, control characters and all; refused on a "
                                          "terminal (redirect it to a file or a pipe).")
@pass_env
def logs(env: Environment, run: Optional[str], follow: bool, workers: tuple[int, ...], tail: Optional[int],
         since: Optional[str], pattern: Optional[str], no_color: bool, show_all: bool, fmt: str, raw: bool) -> None:
    """Show every worker's output of RUN (default: the newest run), merged in time order.

    Works for running runs (from the engine) and finished ones (from the logs saved in the run
    directory, so also after `orch down`). A container's control characters and escape sequences are
    shown visibly (as \\x1b), never sent to the terminal; --raw writes them as they are, to a file or pipe.
    """
    from orchestrator.run.logs import LogFilter, parse_since
    from orchestrator.run.runs import read_logs
    from orchestrator.safeio import dumps
    from orchestrator.safetext import printable

    if raw and fmt == "json":
        raise click.UsageError("--raw and --format json are two ways of writing the lines; pick one")
    if raw and env.stdout_isatty:
        raise click.UsageError("--raw writes a container's bytes as they are, escape sequences and all, and "
                               "never to a terminal; redirect it: orch logs --raw > FILE")

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
        if fmt == "json":  # ASCII only, DEL escaped too: no byte a terminal would read as a control
            env.stdout.write(dumps({"replica": record.replica, "role": record.role, "worker": record.worker,
                                    "stream": record.stream, "time": record.time, "line": record.line},
                                   ensure_ascii=True).replace("\x7f", "\\u007f") + "\n")
            if follow:
                env.stdout.flush()
            continue
        if raw:
            env.stdout.write(f"{record.replica} | {record.line}\n")
            if follow:
                env.stdout.flush()
            continue
        style = REPLICA_COLOURS[record.worker % len(REPLICA_COLOURS)] if colour else ""
        env.out.print(Text(f"{record.replica} | ", style=style) + Text(printable(record.line)), soft_wrap=True)
