"""Frameworks: one folder each under ``frameworks/``, registered here in one line.

A framework's folder holds its spec options and their checks (``options.py``, a ``FrameworkOptions``), its
rendezvous, images and launch (a ``Framework`` with every hook of ``base.py``, as the module's ``FRAMEWORK``),
its image recipe (``image/``, which the generic builder, ``images.builder.build_image``, makes into its own image)
and its trainer (``trainer/``), which reuses ``orch_trainer.reporter`` inside the image for events, heartbeats and
results. Nothing outside ``frameworks/`` asks which framework a job has: the spec, the
CLI's choices, `orch build`, `doctor`, `push` and `bench` loop over this registry.

A framework defined elsewhere (a plug-in, a test) joins with ``register(FRAMEWORK)``.
"""
from __future__ import annotations

import importlib
from typing import Any, Optional

from orchestrator.frameworks.base import Framework, FrameworkOptions, Key
from orchestrator.images.recipe import BuildOptions

__all__ = ["BuildOptions", "Framework", "FrameworkOptions", "Key", "DEFAULT", "get", "names", "register"]

# name -> module holding its FRAMEWORK; modules load when a framework is first asked for. The first is the default.
BUILTIN: dict[str, str] = {
    "tensorflow": "orchestrator.frameworks.tensorflow",
    "mpi": "orchestrator.frameworks.mpi",
    "torch": "orchestrator.frameworks.torch",
    "jax": "orchestrator.frameworks.jax",
}
DEFAULT = next(iter(BUILTIN))
_registered: dict[str, Framework] = {}


def register(framework: Framework) -> None:
    """Add ``framework`` (or replace the one of its name): the spec, the CLI and the backends take it at once."""
    if not framework.name or framework.options.model_fields["name"].default != framework.name:
        raise ValueError(f"framework {framework.name!r}: its options' name field must default to its name")
    _registered[framework.name] = framework


def origin(name: str) -> Optional[str]:
    """Where a framework registered at run time comes from, as ``module:Class`` (None for a built-in one): another
    process (a run's supervisor) registers it again from there (``register_from``)."""
    if name in BUILTIN or name not in _registered:
        return None
    framework = _registered[name]
    return f"{type(framework).__module__}:{type(framework).__qualname__}"


def register_from(ref: str) -> None:
    """Register the framework ``origin`` named: its module imported, its class made with no arguments."""
    module, _, qualname = ref.partition(":")
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    register(target())


def names() -> tuple[str, ...]:
    """Every framework orch runs, the built-in ones first."""
    return tuple(dict.fromkeys([*BUILTIN, *_registered]))


def get(name: str) -> Framework:
    """The framework called ``name``; KeyError if orch has none of that name."""
    if name not in _registered:
        if name not in BUILTIN:
            raise KeyError(name)
        register(importlib.import_module(BUILTIN[name]).FRAMEWORK)
    return _registered[name]


def options_model(name: str) -> type[FrameworkOptions]:
    """The options model of framework ``name``; KeyError if there is none."""
    return get(name).options


def find_options(name: object) -> Optional[type[FrameworkOptions]]:
    """The options model of the framework a user's input names (any value), or None if orch has no such one."""
    return get(name).options if isinstance(name, str) and name in names() else None
