"""How a replica finds its peers, computed once for the host and the trainer: this one file does both.

The host (``plan`` through a framework's ``env`` hook) writes each replica's rendezvous literally where it can
(Compose, Swarm). Where one pod template serves every replica (Kubernetes), the template carries the whole
cluster (``contract.ENV_CLUSTER``) and the kind of rendezvous (``contract.ENV_RENDEZVOUS``), and each pod derives
its own at start-up from the completion index Kubernetes gives it, with the same functions. The file is copied
into the trainer images beside the contract (``orch_trainer/rendezvous.py``), so it imports the standard library
and the contract only.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, MutableMapping, Optional

from . import contract

Cluster = list[list[Any]]  # [[role, [address, ...]], ...] in role order, addresses in index order

# The per-replica variables a kind of rendezvous derives, beyond the role and index every replica gets.
TF_CONFIG = "tf_config"  # TensorFlow's TF_CONFIG: the cluster by role and this replica's task
RANK = "rank"  # a process group's RANK: the replica's place across the whole cluster (PyTorch)
KINDS = ("", TF_CONFIG, RANK)  # "" derives nothing more (MPI's launcher numbers its ranks itself)


def host_of(address: str) -> str:
    """The host part of ``host:port``."""
    return address.rsplit(":", 1)[0]


def cluster_of(addresses: Mapping[tuple[str, int], str]) -> Cluster:
    """The cluster of ``addresses`` ((role, index) -> host:port, in role order, then index order)."""
    cluster: dict[str, list[str]] = {}
    for (role, _index), address in addresses.items():
        cluster.setdefault(role, []).append(address)
    return [[role, members] for role, members in cluster.items()]


def replica_of(cluster: Cluster, completion_index: int, role: Optional[str] = None) -> tuple[str, int]:
    """(role, index within the role) of the pod with ``completion_index``: counted within ``role`` when the
    pod's Job runs one role, else across the roles in order."""
    sizes = {name: len(addresses) for name, addresses in cluster}
    if role is not None:
        if not 0 <= completion_index < sizes.get(role, 0):
            raise ValueError(f"{role} index {completion_index} is outside the cluster {sizes}")
        return role, completion_index
    remaining = completion_index
    for name, size in sizes.items():
        if 0 <= remaining < size:
            return name, remaining
        remaining -= size
    raise ValueError(f"completion index {completion_index} is outside the cluster {sizes}")


def tf_config(cluster: Cluster, role: str, index: int) -> Optional[dict[str, Any]]:
    """TensorFlow's TF_CONFIG for replica (role, index), or None for a cluster of one (no TF_CONFIG at all)."""
    sizes = {name: len(addresses) for name, addresses in cluster}
    if not 0 <= index < sizes.get(role, 0):
        raise ValueError(f"{role} index {index} outside 0..{sizes.get(role, 0) - 1}")
    if sum(sizes.values()) == 1:
        return None
    return {"cluster": {name: list(addresses) for name, addresses in cluster}, "task": {"type": role, "index": index}}


def rank(cluster: Cluster, role: str, index: int) -> int:
    """The replica's place across the whole cluster, roles in order: a process group's RANK."""
    names = [name for name, _addresses in cluster]
    return sum(len(addresses) for _name, addresses in cluster[:names.index(role)]) + index


def derived(kind: str, cluster: Cluster, role: str, index: int) -> dict[str, str]:
    """The per-replica variables of a ``kind`` of rendezvous for replica (role, index)."""
    if kind == TF_CONFIG:
        config = tf_config(cluster, role, index)
        return {} if config is None else {"TF_CONFIG": json.dumps(config, separators=(",", ":"), sort_keys=True, allow_nan=False)}
    if kind == RANK:
        return {"RANK": str(rank(cluster, role, index))}
    if kind:
        raise ValueError(f"unknown rendezvous {kind!r}; orch knows {', '.join(k for k in KINDS if k)}")
    return {}


def env_from_index(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of contract.DERIVED_FROM_INDEX for this pod; {} where the engine set them itself."""
    raw = environ.get(contract.ENV_CLUSTER)
    if not raw:
        return {}
    cluster = json.loads(raw)
    role, index = replica_of(cluster, int(environ[contract.ENV_COMPLETION_INDEX]), environ.get(contract.ENV_ROLE))
    return {
        contract.ENV_ROLE: role,
        contract.ENV_WORKER_INDEX: str(index),
        contract.ENV_NUM_WORKERS: str(len(dict(cluster)[role])),
        **derived(environ.get(contract.ENV_RENDEZVOUS, ""), cluster, role, index),
    }


def derive(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set this pod's derived variables in ``environ``, before anything (TensorFlow) reads them."""
    environ.update(env_from_index(environ))
