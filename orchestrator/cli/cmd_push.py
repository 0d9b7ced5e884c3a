"""`orch push`: copy the image a Swarm job runs to other nodes' engines, when there is no registry; or orch's images
to this host's other engine (Docker to Podman)."""
from __future__ import annotations

import contextlib
from typing import Optional

import click
from rich.table import Table

from orchestrator import frameworks
from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import engine_option, format_option
from orchestrator.cli.tables import _cells


@click.command()
@click.option("--context", "contexts", multiple=True, metavar="NAME",
              help="A Docker context (`docker context ls`) naming another node's engine; repeat for each node.")
@click.option("--to-engine", type=click.Choice(["docker", "podman"]),
              help="Copy orch's images (the bases and every framework's trainer images here, or those of "
                   "--framework) to this host's other engine, e.g. from Docker to Podman, instead of to contexts.")
@click.option("--framework", "chosen", multiple=True, type=click.Choice(frameworks.names()),
              help="With --to-engine: copy this framework's images only. Repeatable. [default: every framework "
                   "whose images are here]")
@click.option("--dataset", type=click.Choice(["mnist", "fashion-mnist", "vader-reviews", "synthetic"]),
              help="Also add this data set to the image (built here first), as `orch up --backend swarm` runs it.")
@click.option("--image", help="Copy this image instead of orch's multi-worker trainer image (a 1-worker job runs "
                               "orch-trainer:<version>-single: pass that to run one on another node).")
@format_option
@engine_option
@pass_env
def push(env: Environment, contexts: tuple[str, ...], to_engine: Optional[str], chosen: tuple[str, ...],
         dataset: Optional[str], image: Optional[str], fmt: str) -> None:
    """Copy the image a `--backend swarm` job runs to other nodes, when they have no registry to pull from; or
    orch's images to this host's other engine.

    `docker save` here, `docker load` on each context's engine; an engine that has the same image already is
    skipped. With --dataset, the image carries that data set (nodes see no folder of this host):

      orch push --context node2 --context node3 --dataset mnist

    With --to-engine, the images built on this host's Docker engine go to Podman (or back), so Podman runs the
    very images Docker does:

      orch push --to-engine podman
    """
    from orchestrator.images.push import push as push_images
    from orchestrator.images.push import push_to_engine

    if contexts and to_engine:
        raise click.UsageError("--context and --to-engine copy to different places; pass one of them")
    if not contexts and not to_engine:
        raise click.UsageError("name the engines to copy to: --context NAME (another node's), or --to-engine "
                               "podman (this host's other engine)")
    if to_engine and (dataset or image):
        raise click.UsageError("--dataset and --image are for --context; --to-engine copies orch's own images")
    if chosen and not to_engine:
        raise click.UsageError("--framework is for --to-engine; with --context, --image names what to copy")
    status = env.err.status("copying images", spinner="dots") if env.stderr_isatty else contextlib.nullcontext()
    with status:
        if to_engine:
            pushed = push_to_engine(to_engine, list(chosen) or None, say=env.say)
        else:
            pushed = push_images(list(contexts), dataset, image, say=env.say)
    if fmt == "json":
        env.json([p.__dict__ for p in pushed])
        return
    table = Table("image", "engine" if to_engine else "context", "copied")
    for p in pushed:
        table.add_row(*_cells(p.image, p.context, "yes" if p.copied else "already there"))
    env.out.print(table)
