"""`orch build`: the trainer images."""
from __future__ import annotations

import contextlib
import json
from typing import Optional

import click

from .env import Environment, pass_env
from .options import format_option
from .tables import images_table


@click.command()
@click.option("--base", help="Base image with python3.11 (e.g. python:3.11-slim-bookworm). [default: orch-base:bookworm]")
@click.option("--bootstrap-base", is_flag=True,
              help="Create orch-base:bookworm with debootstrap if it is missing, checking the Debian archive's "
                   "signatures; only debootstrap runs as root (through sudo when orch is not root).")
@click.option("--mirror", default="http://deb.debian.org/debian", show_default=True, help="Debian mirror for --bootstrap-base.")
@click.option("--force", is_flag=True, help="Rebuild even if the images are up to date.")
@format_option
@pass_env
def build(env: Environment, base: Optional[str], bootstrap_base: bool, mirror: str, force: bool, fmt: str) -> None:
    """Build the single- and multi-worker trainer images, offline.

    Python packages are downloaded by the host's pip into a cached wheelhouse and installed in the
    image with --no-index; no container reaches the network. Images whose inputs have not changed
    are not rebuilt.
    """
    from ..images import build as build_images

    status = env.err.status("building images", spinner="dots") if env.stderr_isatty else contextlib.nullcontext()
    with status:
        results = build_images(base=base, bootstrap=bootstrap_base, force=force, mirror=mirror, say=env.say)
    if fmt == "json":
        env.out.print_json(json.dumps([r.__dict__ for r in results]))
    else:
        env.out.print(images_table(results))
