"""`orch render`: the plan `orch up` would apply, started nowhere."""
from __future__ import annotations

from typing import Any, Optional

import click

from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import GroupedCommand, flag_message, script_options, spec_from, spec_options
from orchestrator.errors import InvalidSpec


@click.command(cls=GroupedCommand)
@spec_options
@script_options
@click.option("--format", "fmt", type=click.Choice(["compose", "json"]), default="compose", show_default=True,
              help="compose: the backend's artifact (the Compose file; with --backend swarm the stack file, with "
                   "what Swarm cannot express on top; with --backend k8s the Kubernetes manifests); json: the whole "
                   "plan with every TF_CONFIG.")
@pass_env
def render(env: Environment, /, fmt: str, script_args: tuple[str, ...], requirements: Optional[str],
           **flags: Any) -> None:
    """Print the Compose file `orch up` would run with the same flags (with --backend swarm, the stack file it
    deploys; with --backend k8s, the manifests to pipe into `kubectl apply -f -`); start nothing."""
    from orchestrator.api import render as make_plan

    spec = spec_from(flags, script_args, requirements)
    try:
        p = make_plan(spec)
    except InvalidSpec as exc:  # found once the flags were read (the script's file): named by flag too
        raise InvalidSpec(flag_message(exc), details=exc.details) from None
    if fmt == "json":
        env.json(p.to_dict())
    else:
        env.stdout.write(p.artifact)
        env.stdout.flush()
