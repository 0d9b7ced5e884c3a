"""The engine-specific fields (registry, overlay MTU, Kubernetes' claim) checked against the job's backend."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

REGISTRY_PATTERN = r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*"
DNS_SUBDOMAIN_PATTERN = r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?"


def check_engine_fields(spec: JobSpec) -> None:
    """Raise ValueError (one line, naming the flag) if the engine-specific fields do not fit the backend; JobSpec's
    last check."""
    if spec.registry is not None and not re.fullmatch(REGISTRY_PATTERN, spec.registry):
        raise ValueError(f"registry: {spec.registry!r} is not HOST[:PORT][/PATH], e.g. registry.example:5000/ml")
    claim = spec.k8s_checkpoint_claim
    if claim is not None and not re.fullmatch(DNS_SUBDOMAIN_PATTERN, claim):
        raise ValueError(f"k8s_checkpoint_claim: {claim!r} is not a Kubernetes object name (lowercase letters, "
                         "digits, - and .)")
    if spec.overlay_mtu and spec.backend != "swarm":
        raise ValueError("overlay_mtu: --overlay-mtu is for --backend swarm's overlay network")
    if spec.overlay_mtu and spec.overlay_mtu < 576:
        raise ValueError(f"overlay_mtu: {spec.overlay_mtu} is below IPv4's minimum of 576")
    if spec.backend == "swarm":
        if spec.network != "bridge":
            raise ValueError(f"network: --network {spec.network} is for --backend compose; on Swarm the replicas "
                             "meet on the stack's overlay network; leave --network out")
        if spec.gpus:
            raise ValueError("gpus: a Swarm service gets GPUs only as generic resources its nodes advertise, which "
                             "orch does not render; use --backend compose or --gpus 0")
    if spec.backend != "k8s":
        return
    if spec.script is not None:
        raise ValueError("script: --script mounts a folder of this host, which a cluster's pods cannot see; "
                         "build an image FROM orch's trainer image with your script in it and pass --image")
    if spec.network != "bridge":
        raise ValueError(f"network: --network {spec.network} is for --backend compose; on Kubernetes every pod "
                         "has its own network; leave --network out")
    if spec.max_restarts and claim is None:
        raise ValueError("max_restarts: a restarted group resumes from checkpoints every pod must reach; pass "
                         "--k8s-checkpoint-claim NAME (a ReadWriteMany PersistentVolumeClaim) or --max-restarts 0")
