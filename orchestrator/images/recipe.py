"""What an image is built from, as the framework seam and the image builder both read it: a framework's recipe
(``ImageRecipe``, declared by its folder) and what `orch build` was asked for (``BuildOptions``). It lives below both,
so that the builder knows recipes without knowing frameworks, and a framework hands its recipe to a builder that never
calls back."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from orchestrator import imageref
from orchestrator.errors import InvalidSpec


@dataclass(frozen=True)
class BuildOptions:
    """What `orch build` was asked for, as each framework's builder reads it."""

    base: Optional[str] = None  # the base image; None: orch's own (orch-base:bookworm)
    bootstrap: bool = False  # make orch's base image with debootstrap when it is missing
    build_base: Optional[str] = None  # the base with a C++ compiler for a recipe's build stage; None: orch's own
    force: bool = False
    mirror: str = "http://deb.debian.org/debian"
    index: Optional[str] = None  # an extra package index for the framework's wheels (PyTorch's CPU-only one)
    allow_insecure_index: bool = False  # take a plain-http index (--allow-insecure-index)

    def __post_init__(self) -> None:
        for flag, image in (("--base", self.base), ("--build-base", self.build_base)):
            try:
                if image is not None:
                    imageref.check(image, flag)
            except ValueError as exc:
                raise InvalidSpec(str(exc)) from None


# The environment of a runtime image an install script makes (a Dockerfile sets its own with ENV): the venv first,
# unbuffered output, no bytecode writes (the root is read-only), and the trainer package on the path.
RUNTIME_ENV = ("PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin", "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1",
               "PYTHONPATH=/opt/orch/trainer", "HOME=/tmp")


@dataclass(frozen=True)
class ImageRecipe:
    """A framework's image as its folder declares it, and all the builder (``images.builder.build_image``) reads.

    ``folder`` holds the lock (requirements.lock, every wheel's version and sha256) and one recipe: a Dockerfile,
    built with the lock's wheels as its context (and an ops/ folder of sources it compiles, on a build base), or
    install.sh, run in a container of the base with the wheels mounted read-only and committed. The image is that
    runtime plus one layer: orch's shared trainer package and ``trainer``'s modules, beside them, flat."""

    name: str  # the framework's: its runtime image is orch-<name>-runtime:<version>
    folder: Path
    tags: dict[str, str]  # each image of the recipe: its kind (the image's orch.kind label) -> its tag
    trainer: tuple[Path, ...]  # the trainer modules of the frameworks that run in this image
    entries: dict[str, str]  # framework -> its trainer's entry module, the image's entries.py
    env: tuple[str, ...] = RUNTIME_ENV  # an install.sh recipe's runtime environment
