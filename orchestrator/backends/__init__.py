"""Backends: one module per engine, each turning the generic plan into its engine's artifact and running it.

Each has the shape of a scheduler (see ``base.Backend``). To add a backend: a module here with a
``Backend`` subclass named in ``BACKENDS``. Modules load only when a backend is asked for.
"""
from __future__ import annotations

import importlib
from typing import Any, Mapping

from orchestrator.backends.base import Backend, Key, ReplicaState, Status

__all__ = ["Backend", "Key", "ReplicaState", "Status", "BACKENDS", "for_record", "for_spec", "get"]

# name -> (module, class)
BACKENDS: dict[str, tuple[str, str]] = {"compose": ("compose", "ComposeBackend"), "k8s": ("k8s", "KubernetesBackend"),
                                        "swarm": ("swarm", "SwarmBackend"), "slurm": ("slurm", "SlurmBackend")}


def get(name: str, engine: Any = None) -> Backend:
    """The backend called ``name``, talking to ``engine`` (created lazily when None)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; orch has {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name]
    backend: Backend = getattr(importlib.import_module(f".{module}", __name__), cls)(engine)
    return backend


def for_spec(spec: Any, engine: Any = None) -> Backend:
    """The backend of a spec (a ``JobSpec``), on the engine its options name (``--engine``) unless ``engine`` is
    given."""
    return get(spec.backend, engine if engine is not None else _engine(getattr(spec.backend_options, "engine", None)))


def for_record(record: Mapping[str, Any], engine: Any = None) -> Backend:
    """The backend a run was applied with, as its plan.json records it, on the engine it ran on: Docker where the
    record names none (a run of an orch before Podman)."""
    name = str(record.get("backend") or "compose")
    if engine is None and name in ENGINE_BACKENDS:
        spec = record.get("spec")
        options = spec.get("backend_options") if isinstance(spec, Mapping) else None
        kind = options.get("engine") if isinstance(options, Mapping) else None
        engine = _engine(kind if isinstance(kind, str) else "docker")
    return get(name, engine)


ENGINE_BACKENDS = ("compose",)  # the backends whose engine the run chooses (--engine)


def _engine(kind: Any) -> Any:
    """An engine client of ``kind`` (docker, podman), made lazily; None for a backend that chooses none."""
    if kind is None:
        return None
    from orchestrator.docker.engine import Engine

    return Engine(kind=str(kind))
