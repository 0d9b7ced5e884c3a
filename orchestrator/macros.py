"""Placeholders for what a replica's environment holds that depends on the replica, filled in by each backend.

A framework writes one environment for all the replicas of a role (``Framework.env``), as a torchx component writes
``macros.replica_id``: where a value depends on the replica it holds a placeholder, and each backend fills it in its
own way. Compose and Swarm give every container its own environment: they get values (``fill`` with ``values_of``).
Kubernetes gives the pods of a Job one template: it writes the completion index the Job gives each pod
(``$(JOB_COMPLETION_INDEX)``) where that is the value, and where it is not (the index within a role, in one Job of
several roles) the pod works the value out at start-up (``rendezvous.py``).

- ``INDEX``: the replica's index within its role (TensorFlow's task index);
- ``RANK``: its place across the whole job, roles in order (a process group's rank, torchrun's node rank);
- ``ROLE``: its role (TensorFlow's task type).

What is the same for every replica is written as it is: the world size, and the peers' addresses, which the
backend gives as ``addresses`` (its own names: Compose's services, Swarm's tasks, a Job's or a JobSet's pods).
Standard library only.
"""
from __future__ import annotations

import re
from typing import Mapping

Key = tuple[str, int]

INDEX = "{{orch.index}}"
RANK = "{{orch.rank}}"
ROLE = "{{orch.role}}"
PLACEHOLDERS = (INDEX, RANK, ROLE)
_PLACEHOLDER = re.compile(r"\{\{orch\.(?:index|rank|role)\}\}")


def values_of(keys: list[Key], key: Key) -> dict[str, str]:
    """What each placeholder stands for in replica ``key`` of a job whose replicas are ``keys`` (roles in order)."""
    return {INDEX: str(key[1]), RANK: str(keys.index(key)), ROLE: key[0]}


def used(value: str) -> set[str]:
    """The placeholders ``value`` holds."""
    return set(_PLACEHOLDER.findall(value))


def fill(value: str, values: Mapping[str, str]) -> str:
    """``value`` with each placeholder replaced by what ``values`` gives for it; KeyError for one it does not give."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(0)], value)


def fill_env(env: Mapping[str, str], values: Mapping[str, str]) -> dict[str, str]:
    """Every value of ``env`` filled (``fill``)."""
    return {name: fill(value, values) for name, value in env.items()}
