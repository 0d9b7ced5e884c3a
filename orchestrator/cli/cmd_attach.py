"""`orch attach`: follow a run under way, from any terminal, to its end."""
from __future__ import annotations

from typing import Optional

import click

from orchestrator.cli.cmd_up import Watcher, show_result
from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import complete_run_ids, format_option


@click.command()
@click.argument("run_id", required=False, shell_complete=complete_run_ids)
@click.option("--quiet", "-q", is_flag=True, help="Do not show the replicas' output, only their progress.")
@format_option
@pass_env
def attach(env: Environment, run_id: Optional[str], quiet: bool, fmt: str) -> None:
    """Follow a run (the latest if RUN_ID is left out) to its end, and exit with its code.

    Shows what `orch up` shows, from now on (`orch logs RUN` has the output before): each worker's epochs, each
    replica's output, what its supervisor says; then the result. Works from another terminal, or after the `orch up`
    that started the run died. A run whose supervisor died is adopted by a new one. Ctrl-C stops the run, as in `orch
    up`; closing the terminal leaves it running. Exit 0 if the run succeeded, 1 if it failed, 130 if interrupted.

    \b
    orch up --workers 3 --run-id big --detach
    orch attach big
    """
    from orchestrator.paths import default_paths
    from orchestrator.run.rundir import resolve
    from orchestrator.run.start import attach as follow_run

    run = resolve(default_paths(), run_id)
    record = run.record()
    spec = record.spec if record is not None else None
    keys = spec.replica_keys() if spec is not None else []
    with Watcher(env, spec.reporting_keys() if spec is not None else [],
                 None if spec is None or spec.script else spec.epochs, keys, quiet=quiet) as watcher:
        info = follow_run(run.run_id, say=env.say, on_event=watcher, on_line=None if quiet else watcher.line,
                          on_state=watcher.state)
    show_result(env, info, fmt)
