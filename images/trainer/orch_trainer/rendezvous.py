"""A replica's own rendezvous, derived at start-up where one pod template serves every replica (Kubernetes).

The template cannot hold a per-replica TF_CONFIG or index, so it carries the whole cluster (``ENV_CLUSTER``)
and Kubernetes gives each pod its completion index; from these the replica computes exactly what Compose
sets literally. Standard library only, like the reporter.
"""
from __future__ import annotations

import json
import os
from typing import Mapping, MutableMapping, Optional

from . import contract

Cluster = list  # [[role, [address, ...]], ...] in role order


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


def tf_config(cluster: Cluster, role: str, index: int) -> Optional[dict]:
    """TensorFlow's TF_CONFIG for replica (role, index), or None for a cluster of one (no TF_CONFIG at all)."""
    if sum(len(addresses) for _name, addresses in cluster) == 1:
        return None
    return {"cluster": {name: list(addresses) for name, addresses in cluster}, "task": {"type": role, "index": index}}


def env_from_index(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of contract.DERIVED_FROM_INDEX for this pod; {} where the engine set them itself."""
    raw = environ.get(contract.ENV_CLUSTER)
    if not raw:
        return {}
    cluster = json.loads(raw)
    role, index = replica_of(cluster, int(environ[contract.ENV_COMPLETION_INDEX]), environ.get(contract.ENV_ROLE))
    env = {
        contract.ENV_ROLE: role,
        contract.ENV_WORKER_INDEX: str(index),
        contract.ENV_NUM_WORKERS: str(len(dict(cluster)[role])),
    }
    if "MASTER_ADDR" in environ:  # PyTorch: the rank is the replica's place across the whole cluster
        before = sum(len(addresses) for name, addresses in cluster[:[n for n, _ in cluster].index(role)])
        env["RANK"] = str(before + index)
        return env
    config = tf_config(cluster, role, index)
    if config is not None:
        env["TF_CONFIG"] = json.dumps(config, separators=(",", ":"), sort_keys=True)
    return env


def derive(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set this pod's derived variables in ``environ``, before anything (TensorFlow) reads them."""
    environ.update(env_from_index(environ))
