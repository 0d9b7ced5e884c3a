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
@click.option("--framework", "frameworks", multiple=True, type=click.Choice(["tensorflow", "torch"]),
              help="Which trainer images to build: tensorflow (TensorFlow and MPI, the default) or torch (PyTorch: "
                   "3.2 GB of wheels, downloaded once, built only when asked for). Repeatable.")
@click.option("--torch-index", metavar="URL", envvar="ORCH_TORCH_INDEX", show_envvar=True,
              help="Take torch from this package index as well as the host's own, e.g. PyTorch's CPU-only index "
                   "https://download.pytorch.org/whl/cpu: its CPU build outranks PyPI's CUDA build of the same "
                   "version, so the image needs no CUDA libraries. Locked on first download. [default: PyPI's "
                   "torch, from images/torch/requirements.lock]")
@click.option("--requirements", metavar="FILE", type=click.Path(dir_okay=False),
              help="Also build an image with the extra packages of this requirements file, for `orch up --script "
                   "... --requirements FILE`: downloaded by the host's pip, added to orch's image, offline.")
@click.option("--data", "datasets", multiple=True, metavar="DATASET",
              type=click.Choice(["mnist", "fashion-mnist", "vader-reviews"]),
              help="Also build the data images of this data set, for nodes that see no folder of this host: the "
                   "trainer image with the data (Swarm) and orch-data:<version>-<dataset> (Kubernetes' init "
                   "container). Repeatable.")
@format_option
@pass_env
def build(env: Environment, base: Optional[str], bootstrap_base: bool, mirror: str, force: bool,
          frameworks: tuple[str, ...], torch_index: Optional[str], requirements: Optional[str],
          datasets: tuple[str, ...], fmt: str) -> None:
    """Build the trainer images, offline: TensorFlow's (with MPI) by default, PyTorch's with --framework torch.

    Python packages are downloaded by the host's pip into a cached wheelhouse and installed in the
    image with --no-index; no container reaches the network. Images whose inputs have not changed
    are not rebuilt.
    """
    from pathlib import Path

    from ..images import BuiltImage, build as build_images

    status = env.err.status("building images", spinner="dots") if env.stderr_isatty else contextlib.nullcontext()
    wanted = set(frameworks or ("tensorflow",))
    source = click.get_current_context().get_parameter_source("torch_index")
    if torch_index and "torch" not in wanted and source == click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("--torch-index is for the PyTorch image; add --framework torch")
    if "torch" in wanted and torch_index:
        from ..torch_images import index_download_args

        index_download_args(torch_index)  # a bad URL is refused before anything is built
    with status:
        results = []
        if "tensorflow" in wanted:
            results = build_images(base=base, bootstrap=bootstrap_base, force=force, mirror=mirror, say=env.say)
        elif bootstrap_base and base is None:
            from ..engine import Engine
            from ..images import DEFAULT_BASE, bootstrap_base as make_base

            engine = Engine()
            if engine.image_labels(DEFAULT_BASE) is None:  # only the base: the TensorFlow images are not asked for
                make_base(engine, DEFAULT_BASE, mirror, env.say)
        if "torch" in wanted:
            from ..torch_images import build as build_torch

            results += build_torch(base=base, force=force, index=torch_index, say=env.say)
        if requirements is not None:
            from ..user_images import build as build_user

            results.append(BuiltImage(*build_user(Path(requirements), force=force, say=env.say)))
        if datasets:
            from ..data_images import build_all

            results += [BuiltImage(*r) for r in build_all(list(datasets), base or "orch-base:bookworm", say=env.say)]
    if fmt == "json":
        env.out.print_json(json.dumps([r.__dict__ for r in results]))
    else:
        env.out.print(images_table(results))
