"""The one Docker boundary: every Docker Engine and CLI call goes through ``Engine``.

The Docker SDK (engine API, HTTP calls bounded by a client timeout) serves images, containers and logs;
the docker CLI's verbs (`docker compose`, `docker stack`, images saved and loaded on another context's
engine) go through python-on-whales, each call under a time limit. The SDK client is created lazily and
can be injected, so tests can pass a fake; tests of the CLI's verbs put a fake `docker` first on PATH.
Errors are translated into orch's own, with a hint of what to do.

``Engine`` mixes the boundary's parts, one module each: ``base`` (the client, errors and time limits),
``images``, ``containers``, ``volumes``, ``cli`` (compose, stack, other contexts) and ``swarm``.
"""
from __future__ import annotations

from orchestrator.docker.base import ENGINE_HINT, EngineBase, engine_address
from orchestrator.docker.cli import CliOps
from orchestrator.docker.containers import ContainerOps, ContainerState, parse_container
from orchestrator.docker.images import ImageOps
from orchestrator.docker.swarm import SwarmOps
from orchestrator.docker.volumes import VolumeOps

__all__ = ["ENGINE_HINT", "ContainerState", "Engine", "EngineBase", "engine_address", "parse_container"]


class Engine(ImageOps, ContainerOps, VolumeOps, CliOps, SwarmOps):
    """Docker Engine, Compose and Swarm operations, in orch's terms."""
