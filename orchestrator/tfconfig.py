"""TF_CONFIG for every container of a job."""
from __future__ import annotations

import hashlib
import json
from typing import Optional

from .spec import JobSpec

TF_PORT_BASE = 12345


def port_base(spec: JobSpec) -> int:
    """First port of a run's workers on loopback. On the host's network, runs share the port space, so
    each run takes a block derived from its id (deterministic, so the plan stays pure)."""
    if spec.network != "host":
        return TF_PORT_BASE
    return 20_000 + int(hashlib.sha256(spec.run_id.encode()).hexdigest(), 16) % 1000 * 32


def worker_addresses(spec: JobSpec) -> list[str]:
    """Addresses the workers listen on, in task order; worker 0 is the chief."""
    if spec.network in ("shared", "host"):
        # One network namespace: each worker takes its own loopback port.
        return [f"localhost:{port_base(spec) + i}" for i in range(spec.workers)]
    return [f"worker-{i}:{TF_PORT_BASE}" for i in range(spec.workers)]


def tf_config(spec: JobSpec, index: int) -> Optional[dict]:
    """TF_CONFIG of worker ``index``, or None for a single worker (no cluster at all)."""
    if not 0 <= index < spec.workers:
        raise ValueError(f"worker index {index} outside 0..{spec.workers - 1}")
    if spec.workers == 1:
        return None
    return {"cluster": {"worker": worker_addresses(spec)}, "task": {"type": "worker", "index": index}}


def tf_config_json(spec: JobSpec, index: int) -> Optional[str]:
    """TF_CONFIG as the compact JSON string TensorFlow reads."""
    config = tf_config(spec, index)
    return None if config is None else json.dumps(config, separators=(",", ":"), sort_keys=True)
