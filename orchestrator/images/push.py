"""`orch push`: orch's images, and a data set inside them, copied to another engine: a swarm node with no registry,
through a Docker context (`docker save` into a file in orch's cache, then `docker --context NAME load` of it), or
the other engine of this host (Docker's images to Podman, or back); skipped where that engine has the same image
already."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from orchestrator import frameworks, imageref
from orchestrator.data import prepare as datasets
from orchestrator.data.prepare import dataset_dir
from orchestrator.docker.engine import Engine
from orchestrator.errors import ImageMissing, InvalidSpec
from orchestrator.images import data as data_images
from orchestrator.paths import Paths, default_paths

Say = Callable[[str], None]


@dataclass(frozen=True)
class Pushed:
    """One image and whether it was copied (False: the context's engine had it already)."""

    image: str
    context: str
    copied: bool


def push(contexts: list[str], dataset: Optional[str] = None, image: Optional[str] = None,
         engine: Optional[Engine] = None, paths: Optional[Paths] = None, say: Optional[Say] = None) -> list[Pushed]:
    """Copy the image a Swarm job runs (``image``, default orch's multi-worker trainer; with ``dataset``, that
    image with the data set added, built here first) to the engine of every context in ``contexts``."""
    if image is not None:
        try:
            imageref.check(image, "--image")
        except ValueError as exc:
            raise InvalidSpec(str(exc)) from None
    engine = engine or Engine()
    paths = paths or default_paths()
    say = say or (lambda _msg: None)
    engine.ping()
    base = image or frameworks.get(frameworks.DEFAULT).main_image()
    engine.require_image(base, "run `orch build` first" if image is None else "pull or build it first")
    wanted = base
    if dataset is not None and dataset not in data_images.NEEDS_NO_DATA:
        datasets.prepare(paths.data, dataset, say)
        wanted = data_images.with_data(base, dataset)
        data_images.ensure(engine, base, wanted, dataset_dir(paths.data, dataset), say)
    local = engine.image_id(wanted)
    out = []
    for context in contexts:
        if engine.context_image_id(context, wanted) == local:
            say(f"{wanted} is already on context {context}")
            out.append(Pushed(wanted, context, False))
            continue
        say(f"copying {wanted} to context {context} (docker save, then docker load)")
        engine.copy_image(wanted, context, paths.cache)
        if engine.context_image_id(context, wanted) != local:
            raise ImageMissing(f"{wanted} did not arrive on context {context} as the same image")
        out.append(Pushed(wanted, context, True))
    return out


def push_to_engine(target: str, framework_names: Optional[list[str]] = None, engine: Optional[Engine] = None,
                   paths: Optional[Paths] = None, say: Optional[Say] = None) -> list[Pushed]:
    """Copy orch's images from this host's engine (``engine``, default $ORCH_ENGINE's, else Docker) to its other
    engine ``target`` (docker, podman): the bases (so `orch build` there builds on them) and the trainer images
    of ``framework_names`` (default: every framework whose images are here). An image the target has already, by
    id, is skipped; one missing here is skipped, said, unless a framework named asks for it."""
    from orchestrator.images.builder import DEFAULT_BASE, DEFAULT_BUILD_BASE

    source = engine or Engine()
    paths = paths or default_paths()
    say = say or (lambda _msg: None)
    if target == source.kind.name:
        raise InvalidSpec(f"--to-engine {target}: the images are on the {source.kind.label} already; copy them to "
                          "the other engine (--to-engine docker or podman)")
    destination = Engine(kind=target)
    source.ping()
    destination.ping()
    named = framework_names is not None
    chosen = [frameworks.get(n) for n in (framework_names or frameworks.names())]
    wanted = [DEFAULT_BASE, DEFAULT_BUILD_BASE, *(ref for f in chosen for ref in f.image_refs())]
    out, ids = [], {}
    for ref in dict.fromkeys(wanted):
        if source.image_labels(ref) is None:
            framework = next((f for f in chosen if ref in f.image_refs()), None)
            if named and framework is not None:
                raise ImageMissing(f"{ref} is not on the {source.kind.label}; run `{framework.build_command()}` first")
            continue
        ids[ref] = source.image_id(ref)
        if destination.image_labels(ref) is not None and destination.image_id(ref) == ids[ref]:
            say(f"{ref} is on the {destination.kind.label} already")
            out.append(Pushed(ref, target, False))
            del ids[ref]
    if ids:  # one archive: the layers the images share travel once
        say(f"copying {', '.join(ids)} to the {destination.kind.label} (docker save, then docker load)")
        source.copy_images_to(list(ids), destination, paths.cache)
        for ref, local in ids.items():
            if destination.image_id(ref) != local:
                raise ImageMissing(f"{ref} did not arrive on the {destination.kind.label} as the same image")
            out.append(Pushed(ref, target, True))
    if not out:
        raise ImageMissing(f"none of orch's images is on the {source.kind.label}; run `orch build` first")
    return out
