"""Backends: one module per engine, each turning the generic plan into its engine's artifact and running it.

Each has the shape of a scheduler (see ``base.Backend``). To add a backend: a module here with a
``Backend`` subclass named in ``BACKENDS``. Modules load only when a backend is asked for.
"""
from __future__ import annotations

import importlib
from typing import Any

from orchestrator.backends.base import Backend, Key, ReplicaState, Status

__all__ = ["Backend", "Key", "ReplicaState", "Status", "BACKENDS", "get"]

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
