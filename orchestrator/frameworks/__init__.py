"""Frameworks, host side: how the replicas of a job find each other, and which image they run.

A framework is a module with one ``FRAMEWORK`` object. To add one: its options model in ``framework_options.py``
(and in ``FrameworkOptions``), a module here, and an entry in ``FRAMEWORKS``. Its trainer, inside the
image, reuses ``orch_trainer.reporter`` for events, heartbeats and results.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..spec import JobSpec

Key = tuple[str, int]  # (role, index within the role)


class Framework(Protocol):
    """What orch needs of a framework to plan a job."""

    name: str
    port: int  # where a replica listens for its peers, inside its own network namespace

    def image(self, spec: "JobSpec") -> str:
        """The image every replica of ``spec`` runs."""

    def env(self, spec: "JobSpec", key: Key, addresses: dict[Key, str]) -> dict[str, str]:
        """The rendezvous environment of replica ``key``, given every replica's address."""

    def describe(self, spec: "JobSpec", key: Key, addresses: dict[Key, str]) -> dict[str, Any]:
        """The rendezvous of replica ``key`` as `orch render --format json` shows it."""


# name -> module; each module has a FRAMEWORK object. Modules load only when a framework is asked for.
FRAMEWORKS: dict[str, str] = {"tensorflow": "tensorflow", "mpi": "mpi", "torch": "torch"}


def get(name: str) -> Framework:
    """The framework called ``name`` (the spec has validated it)."""
    return importlib.import_module(f".{FRAMEWORKS[name]}", __name__).FRAMEWORK


def shm_mb(spec: "JobSpec") -> int:
    """The /dev/shm a replica of ``spec`` needs in MiB, or 0 for the engine's default (64 MiB): a framework whose
    processes share tensors through it (PyTorch's DataLoader workers) asks for more with ``shm_mb``."""
    return getattr(get(spec.framework.name), "shm_mb", 0)


def build_command(spec: "JobSpec") -> str:
    """The command that builds the image orch's own trainer runs in for ``spec``'s framework."""
    return getattr(get(spec.framework.name), "build_command", "orch build")
