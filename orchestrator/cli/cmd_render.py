"""`orch render`: the plan `orch up` would apply, started nowhere."""
from __future__ import annotations

import json
import os
from typing import Any

import click

from .env import Environment, pass_env
from .options import spec_from, spec_options


@click.command()
@spec_options
@click.option("--format", "fmt", type=click.Choice(["compose", "json"]), default="compose", show_default=True,
              help="compose: the Compose file; json: the whole plan with every TF_CONFIG.")
@pass_env
def render(env: Environment, fmt: str, **flags: Any) -> None:
    """Print the Compose file `orch up` would run with the same flags; start nothing."""
    from ..paths import default_paths
    from ..plan import plan
    from ..runner import container_user

    p = plan(spec_from(flags), default_paths(), user=container_user(), host_cpus=os.cpu_count() or 1)
    if fmt == "json":
        env.out.print_json(json.dumps(p.to_dict()))
    else:
        env.stdout.write(p.artifact)
        env.stdout.flush()
