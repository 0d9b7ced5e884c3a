"""TensorFlow: a TF_CONFIG per replica (cluster grouped by role), and orch's TensorFlow images."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Optional

from .. import __version__

if TYPE_CHECKING:
    from ..spec import JobSpec

Key = tuple[str, int]
IMAGE_REPO = "orch-trainer"
IMAGE_KINDS = ("single", "multi")


def image_ref(kind: str) -> str:
    """The tag of orch's own trainer image of ``kind`` (single or multi) for this version."""
    return f"{IMAGE_REPO}:{__version__}-{kind}"


def tf_config(spec: "JobSpec", key: Key, addresses: dict[Key, str]) -> Optional[dict]:
    """TF_CONFIG of replica ``key``, or None for a single worker (no cluster at all)."""
    role, index = key
    if not 0 <= index < spec.role_replicas(role):
        raise ValueError(f"{role} index {index} outside 0..{spec.role_replicas(role) - 1}")
    if len(addresses) == 1:
        return None
    cluster: dict[str, list[str]] = {}
    for (name, _i), address in addresses.items():  # addresses come in role order, then index order
        cluster.setdefault(name, []).append(address)
    return {"cluster": cluster, "task": {"type": role, "index": index}}


class TensorFlow:
    """TensorFlow's strategies: one container for single and mirrored; one worker per container for mwms and
    custom (worker 0 is the chief); a chief, parameter servers and workers, each in its own container, for ps."""

    name = "tensorflow"
    port = 12345

    def image(self, spec: "JobSpec") -> str:
        return spec.image or image_ref("single" if len(spec.replica_keys()) == 1 else "multi")

    def env(self, spec: "JobSpec", key: Key, addresses: dict[Key, str]) -> dict[str, str]:
        config = tf_config(spec, key, addresses)
        return {} if config is None else {"TF_CONFIG": json.dumps(config, separators=(",", ":"), sort_keys=True)}

    def describe(self, spec: "JobSpec", key: Key, addresses: dict[Key, str]) -> dict[str, Any]:
        return {"tf_config": tf_config(spec, key, addresses)}


FRAMEWORK = TensorFlow()
