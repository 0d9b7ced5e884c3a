"""`orch build`: the trainer images."""
from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any, Optional

import click

from orchestrator.cli.env import Environment, pass_env
from orchestrator.cli.options import engine_option, format_option
from orchestrator.cli.tables import images_table

if TYPE_CHECKING:
    from orchestrator.frameworks import Framework


def framework_names() -> list[str]:
    """The choices of --framework: every registered framework (names only: nothing is imported for them)."""
    from orchestrator import frameworks

    return list(frameworks.names())



def index_takers() -> list["Framework"]:
    """The frameworks whose builder takes wheels from an extra package index."""
    from orchestrator import frameworks

    return [frameworks.get(n) for n in frameworks.names() if frameworks.get(n).takes_index]


@click.command()
@click.option("--base", help="Base image with python3.11 (e.g. python:3.11-slim-bookworm). [default: orch-base:bookworm]")
@click.option("--build-base", metavar="IMAGE",
              help="Image with python3.11 and g++, of --base's distribution, where the TensorFlow image's build "
                   "stage compiles orch's MPI all-reduce op (e.g. python:3.11-bookworm); the image itself has no "
                   "compiler. [default: orch-build-base:bookworm with orch's base, else --base]")
@click.option("--bootstrap-base", is_flag=True,
              help="Create orch-base:bookworm, and orch-build-base:bookworm (the same with g++), with debootstrap "
                   "if they are missing, checking the Debian archive's signatures; only debootstrap runs as root "
                   "(through sudo when orch is not root).")
@click.option("--mirror", default="http://deb.debian.org/debian", show_default=True, help="Debian mirror for --bootstrap-base.")
@click.option("--force", is_flag=True, help="Rebuild even if the images are up to date.")
@click.option("--framework", "chosen", multiple=True, type=click.Choice(framework_names()),
              help="Whose trainer images to build. [default: every framework's but those built only on demand, "
                   "whose wheels are large and downloaded once] Repeatable.")
@click.option("--index", *[f"--{f.name}-index" for f in index_takers()], "index", metavar="URL",
              envvar=[f"ORCH_{f.name.upper()}_INDEX" for f in index_takers()], show_envvar=True,
              help="Take a framework's wheels from this package index: "
                   + "; ".join(f"--framework {f.name}: {f.index_help}" for f in index_takers())
                   + ". Resolved, then locked with sha256 hashes at the first build; https only. [default: the "
                     "recipe's requirements.lock, from PyPI]")
@click.option("--requirements", metavar="FILE", type=click.Path(dir_okay=False),
              help="Also build an image with the extra packages of this requirements file, for `orch up --script "
                   "... --requirements FILE`: resolved on the host's index, locked with sha256 hashes, downloaded "
                   "by the host's pip, added to orch's image, offline. The file lists packages only (no pip options).")
@click.option("--allow-insecure-index", is_flag=True,
              help="Take a plain-http package index or wheel URL (--index, the host's index, a URL in "
                   "--requirements): anyone on the way could swap the wheels before they are locked.")
@click.option("--data", "datasets", multiple=True, metavar="DATASET",
              type=click.Choice(["mnist", "fashion-mnist", "vader-reviews"]),
              help="Also build the data images of this data set, for nodes that see no folder of this host: the "
                   "trainer image with the data (Swarm) and orch-data:<version>-<dataset> (Kubernetes' init "
                   "container). Repeatable.")
@format_option
@engine_option
@pass_env
def build(env: Environment, base: Optional[str], build_base: Optional[str], bootstrap_base: bool, mirror: str,
          force: bool, chosen: tuple[str, ...], index: Optional[str], requirements: Optional[str],
          allow_insecure_index: bool, datasets: tuple[str, ...], fmt: str) -> None:
    """Build the trainer images, offline: every framework's but those built on demand (--framework NAME).

    Python packages are downloaded by the host's pip into a cached wheelhouse and installed in the
    image with --no-index; no container reaches the network. Images whose inputs have not changed
    are not rebuilt.
    """
    from pathlib import Path

    from orchestrator import frameworks
    from orchestrator.images.builder import BuiltImage
    from orchestrator.images.wheels import insecure_allowed

    status = env.err.status("building images", spinner="dots") if env.stderr_isatty else contextlib.nullcontext()
    # By default every framework's images but those built on demand only.
    wanted = [frameworks.get(name) for name in chosen] or [
        f for f in map(frameworks.get, frameworks.names()) if not f.on_demand]
    source = click.get_current_context().get_parameter_source("index")
    takers = [f for f in wanted if f.takes_index]
    if index and not takers and source == click.core.ParameterSource.COMMANDLINE:
        on_index = [n for n in frameworks.names() if frameworks.get(n).takes_index]
        raise click.UsageError(f"--index (or --<framework>-index) is for an image whose wheels come from an index; add --framework "
                               f"{' or --framework '.join(on_index)}")
    with insecure_allowed(allow_insecure_index):  # for --torch-index's builder, which the framework hook calls
        for framework in takers:
            if index:
                framework.check_index(index)  # a bad URL is refused before anything is built
    if requirements is not None:
        from orchestrator.images.user import check

        if not any(f.takes_requirements for f in wanted):
            raise click.UsageError(f"--requirements adds packages to an image of --framework "
                                   f"{' or '.join(n for n in frameworks.names() if frameworks.get(n).takes_requirements)}"
                                   f"; --framework {', '.join(f.name for f in wanted)} takes none")
        check(Path(requirements), allow_insecure_index)  # an option line or a plain-http URL, before any build
    options = frameworks.BuildOptions(base=base, bootstrap=bootstrap_base, force=force, mirror=mirror, index=index,
                                      allow_insecure_index=allow_insecure_index, build_base=build_base)
    with status:
        results: list[Any] = []
        if bootstrap_base and base is None:
            from orchestrator.docker.engine import Engine
            from orchestrator.images.bootstrap import BASE_PACKAGES, BUILD_BASE_PACKAGES, bootstrap_bases
            from orchestrator.images.builder import DEFAULT_BASE, DEFAULT_BUILD_BASE, compiles

            # orch's base (every image's), and its build base if a recipe built here compiles: both at once
            bases: list[tuple[str, tuple[str, ...]]] = [(DEFAULT_BASE, BASE_PACKAGES)]
            if build_base is None and any((recipe := f.recipe()) is not None and compiles(recipe) for f in wanted):
                bases.append((DEFAULT_BUILD_BASE, BUILD_BASE_PACKAGES))
            engine = Engine()
            bootstrap_bases(engine, [b for b in bases if engine.image_labels(b[0]) is None], mirror, env.say)
        built: set[str] = set()
        for framework in wanted:
            if set(framework.image_refs()) <= built:
                continue  # another framework's images (MPI runs TensorFlow's), built already
            results += framework.build(options, None, None, env.say)
            built.update(framework.image_refs())
        if requirements is not None:  # on the main image of each framework built that takes packages
            from orchestrator.images.user import build as build_user

            parents: set[str] = set()
            for framework in [f for f in wanted if f.takes_requirements]:
                if framework.main_image() not in parents:
                    parents.add(framework.main_image())
                    results.append(BuiltImage(*build_user(Path(requirements), force=force, say=env.say,
                                                          allow_insecure=allow_insecure_index,
                                                          framework=framework.name)))
        if datasets:
            from orchestrator.images.data import build_all

            results += [BuiltImage(*r) for r in build_all(list(datasets), base or "orch-base:bookworm", say=env.say)]
    if fmt == "json":
        env.json([r.__dict__ for r in results])
    else:
        env.out.print(images_table(results))
