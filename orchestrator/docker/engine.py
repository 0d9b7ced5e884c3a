"""The one Docker boundary: every Docker Engine and CLI call goes through ``Engine``.

The Docker SDK (engine API, HTTP calls bounded by a client timeout) serves images, containers and logs;
the `docker compose` v2 CLI runs as a subprocess with a time limit on every call. The SDK client is
created lazily; both it and the command runner can be injected, so tests can pass fakes. Errors are
translated into orch's own, with a hint of what to do.

``Engine`` mixes the boundary's parts, one module each: ``base`` (the client, errors and time limits),
``images``, ``containers``, ``cli`` (compose, stack, other contexts) and ``swarm``.
"""
from __future__ import annotations

from orchestrator.docker.base import ENGINE_HINT, EngineBase, engine_address
from orchestrator.docker.cli import CliOps
from orchestrator.docker.containers import ContainerOps, ContainerState, parse_container
from orchestrator.docker.images import ImageOps
from orchestrator.docker.swarm import SwarmOps

__all__ = ["ENGINE_HINT", "ContainerState", "Engine", "EngineBase", "engine_address", "parse_container"]


class Engine(ImageOps, ContainerOps, CliOps, SwarmOps):
    """Docker Engine, Compose and Swarm operations, in orch's terms."""
