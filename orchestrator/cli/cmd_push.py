"""`orch push`: copy the image a Swarm job runs to other nodes' engines, when there is no registry."""
from __future__ import annotations

import contextlib
from typing import Optional

import click
from rich.table import Table

from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import format_option
from orchestrator.cli.tables import _cells


@click.command()
@click.option("--context", "contexts", multiple=True, required=True, metavar="NAME",
              help="A Docker context (`docker context ls`) naming another node's engine; repeat for each node.")
@click.option("--dataset", type=click.Choice(["mnist", "fashion-mnist", "vader-reviews", "synthetic"]),
              help="Also add this data set to the image (built here first), as `orch up --backend swarm` runs it.")
@click.option("--image", help="Copy this image instead of orch's multi-worker trainer image (a 1-worker job runs "
                               "orch-trainer:<version>-single: pass that to run one on another node).")
@format_option
@pass_env
def push(env: Environment, contexts: tuple[str, ...], dataset: Optional[str], image: Optional[str], fmt: str) -> None:
    """Copy the image a `--backend swarm` job runs to other nodes, when they have no registry to pull from.

    `docker save` here, `docker load` on each context's engine; an engine that has the same image already is
    skipped. With --dataset, the image carries that data set (nodes see no folder of this host):

      orch push --context node2 --context node3 --dataset mnist
    """
    from orchestrator.images.push import push as push_images

    status = env.err.status("copying images", spinner="dots") if env.stderr_isatty else contextlib.nullcontext()
    with status:
        pushed = push_images(list(contexts), dataset, image, say=env.say)
    if fmt == "json":
        env.json([p.__dict__ for p in pushed])
        return
    table = Table("image", "context", "copied")
    for p in pushed:
        table.add_row(*_cells(p.image, p.context, "yes" if p.copied else "already there"))
    env.out.print(table)
